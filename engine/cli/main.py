"""`megakernel`: the parser, the global `--debug` / `--version` flags, and one-line errors.

Every failure ends as `megakernel <command>: error: <one line>` on stderr: exit 2 for errors in what
the user gave (a bad checkpoint, a missing file, an impossible setting), exit 1 with a hint for
anything unexpected, 130 on Ctrl-C. `--debug` (before or after the command) adds the traceback.
"""
from __future__ import annotations

import argparse
import sys
import traceback

from engine.backends.torchrun_launch import TorchrunLaunch, check_launch, run_launched_worker, torchrun_launch
from engine.cli import build, demo, distribution, generate, init_random, profile

CORE_COMMANDS = (init_random, generate, demo, build, profile)
# Errors about the user's input or environment: the message is the whole story. (ConfigError and
# WeightLoadError are ValueErrors; CudaBuildError is a RuntimeError; a missing optional dependency
# is a ModuleNotFoundError.)
USER_ERRORS = (ValueError, OSError, RuntimeError, ModuleNotFoundError)
EXIT_USER_ERROR, EXIT_UNEXPECTED, EXIT_INTERRUPTED = 2, 1, 130
DESCRIPTION = "Llama inference as one persistent CUDA megakernel: generate, serve, benchmark, profile."
DEBUG_HELP = "print the full traceback of an error"


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (compiler logs and the like follow on later lines)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _add_plugins(sub: argparse._SubParsersAction, debug: bool) -> list[str]:
    """Register every declared command plugin; one note per plugin that could not be loaded."""
    notes = []
    for plugin in distribution.command_plugins():
        try:
            plugin.load()(sub)
        except Exception as exc:  # noqa: BLE001 (a broken plugin must not take the other commands down)
            if debug:
                traceback.print_exception(exc)
            notes.append(f"  {plugin.name} ({plugin.target}): {type(exc).__name__}: {one_line(exc)}")
    return notes


def _says_something(default: object) -> bool:
    """Whether a flag's default is worth showing: not None, False, empty or argparse's SUPPRESS."""
    if default is None or default is False or default == argparse.SUPPRESS:
        return False
    return not (isinstance(default, (list, tuple, str)) and len(default) == 0)


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, leaving out the defaults that say nothing (None, False, SUPPRESS)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if not _says_something(action.default):
            return action.help or ""
        return super()._get_help_string(action) or ""


def build_parser(debug: bool = False) -> argparse.ArgumentParser:
    """The full parser. With `debug`, a plugin that fails to load prints its traceback (it is left out either way)."""
    parser = argparse.ArgumentParser(prog="megakernel", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"megakernel {distribution.version()}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in CORE_COMMANDS:
        command.register(sub)
    notes = _add_plugins(sub, debug)
    if notes:
        parser.epilog = "commands left out (run with --debug for the traceback):\n" + "\n".join(notes)
    for command_parser in {id(p): p for p in sub.choices.values()}.values():
        # Every flag's help shows its default (the one EngineConfig / BenchConfig / the command sets).
        command_parser.formatter_class = DefaultsHelpFormatter
        for action in command_parser._actions:
            if action.help is None and action.option_strings and _says_something(action.default):
                action.help = "default: %(default)s"
        try:
            # SUPPRESS: without the flag after the command, the global one's value stands.
            command_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        except argparse.ArgumentError:
            pass  # the command has a --debug of its own; the global flag still works before the command
    return parser


def _report(command: str, exc: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
    user_error = isinstance(exc, USER_ERRORS)
    line = f"megakernel {command}: error: "
    line += one_line(exc) if user_error else f"{type(exc).__name__}: {one_line(exc)}"
    if not user_error and not debug:
        line += " (run with --debug for the traceback)"
    print(line, file=sys.stderr)
    return EXIT_USER_ERROR if user_error else EXIT_UNEXPECTED


def _check_torchrun(args: argparse.Namespace, launch: TorchrunLaunch) -> None:
    """Rank 0 of a torchrun launch: the command must be one whose engine takes every rank torchrun started."""
    world = getattr(args, "tensor_parallel_size", None)
    if args.command not in ("generate", "serve") or world is None:
        raise ValueError(f"torchrun started {launch.world} processes: run `generate` or `serve` with "
                         f"--tensor-parallel-size {launch.world} under it")
    if getattr(args, "engine_process", None) is True:  # the ranks' group is this process's: its engine cannot move
        raise ValueError("--engine-process: not under torchrun (rank 0's engine must stay in the process torchrun "
                         "started)")
    check_launch(launch, world, getattr(args, "backend", "torch"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    launch = torchrun_launch()
    if launch is not None and launch.rank != 0:  # torchrun's ranks 1..N-1 serve rank 0's engine, whatever the command
        return run_launched_worker(launch)
    try:
        args = build_parser(debug).parse_args(argv)
        try:
            if launch is not None:
                _check_torchrun(args, launch)
            return int(args.func(args) or 0)
        except Exception as exc:  # noqa: BLE001 (every error ends as one line; --debug shows the rest)
            return _report(args.command, exc, args.debug)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
