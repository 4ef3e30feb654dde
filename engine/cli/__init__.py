"""The `megakernel` command line: `main.py` builds the parser and turns errors into one line; each
core subcommand lives in its own module here, and packages above the engine add theirs through the
`megakernel.commands` entry points (see `distribution.py`)."""
