"""The `megakernel` command line. Each area registers its own subcommands; this file only wires them."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable

# (module, register function) of each area's subcommands; a missing area is skipped with a note
# rather than breaking the whole CLI.
SUBCOMMAND_MODULES = (
    ("engine.cli_commands", "register"),
    ("engine.bench.cli", "register"),
    ("server.cli", "register"),
    ("profiler.cli", "register"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="megakernel", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module_name, func_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            # An area whose optional dependency is missing (e.g. no fastapi on a bare GPU box) loses
            # its subcommands; the rest of the CLI keeps working.
            continue
        register: Callable[[argparse._SubParsersAction], None] = getattr(module, func_name)
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"megakernel {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
