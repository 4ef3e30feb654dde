"""`python -m engine.cli ...`: the `megakernel` command from a source tree that is not pip-installed."""
import sys

from engine.cli.main import main

sys.exit(main())
