"""`python -m profiler ...`: the `megakernel profile` subcommand without the engine CLI."""
import sys

from profiler.cli import main

sys.exit(main())
