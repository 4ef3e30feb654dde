"""`megakernel profile`: collect a profile (live, via engine.profiling), re-render a saved raw.npz, or compare two.

The command lives with the engine so that profiler/ stays a library that reads and draws records. Errors in
what the user gave (a bad --from file, a missing GPU) are one line naming the file or flag, exit 2.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from engine.bench.config import parse_prompt_lens
from engine.cuda.kernel_option_flag import add_kernel_option_argument
from engine.engine_config import EngineConfig
from engine.scheduler.compiler.target import DEFAULT_SIMULATED_SMS
from profiler.record import RAW_NAME, ProfileFormatError, ProfileRecord, load_npz, raw_path

DESCRIPTION = """Profile decode steps (or, with --chunk, a prompt chunk) per SM and write into --out: raw.npz (timings
+ instruction words), trace.json (open in ui.perfetto.dev), gantt.html (self-contained, offline), gantt.png and
summary.txt/json.
VM timelines come from the cost model and are labelled SIMULATED everywhere. With --compare A B: compare.txt
and compare.html (both Gantts on one time scale) instead."""
STEPS_HELP = ("decode steps to run and record, every one of them on every backend (each step one token longer; "
              "the charts show them back to back, without the host's time between launches)")
EXIT_USER_ERROR = 2


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from", dest="from_npz", type=Path, metavar="RAW_NPZ",
                     help="re-render a saved profile: DIR/raw.npz or its directory DIR (no GPU or model needed)")
    src.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                     help="compare two saved profiles (each DIR or DIR/raw.npz): makespan and per-opcode deltas, "
                          "and both Gantts on one page")
    src.add_argument("--model", type=Path, metavar="DIR", help="HF checkpoint directory to profile")
    src.add_argument("--preset", metavar="NAME", help="named model preset (random weights) to profile")
    p.add_argument("--backend", choices=("auto", "cuda", "vm"), default="auto",
                   help="cuda: kernel timing records; vm: simulated timeline (default: cuda if available)")
    p.add_argument("--batch", type=_positive_int, default=1, help="decode batch size (sequences)")
    p.add_argument("--prompt-len", type=_positive_int, default=128, help="tokens of context per sequence")
    p.add_argument("--prompt-lens", type=parse_prompt_lens, default=(), metavar="L,L,...",
                   help="one sequence per length instead of --batch sequences of --prompt-len (LxN: N of length L; "
                        "e.g. 32000,1000x15)")
    p.add_argument("--steps", type=_positive_int, default=1, help=STEPS_HELP)
    p.add_argument("--chunk", type=_positive_int, default=None, metavar="N",
                   help="the first recorded step is a prompt chunk: each sequence's last N prompt tokens at once "
                        "(chunked prefill; its earlier tokens are prefilled first), the later steps decode")
    p.add_argument("--decode-lens", type=parse_prompt_lens, default=(), metavar="L,L,...",
                   help="with --chunk: sequences of these context lengths decode one token each in the chunk's step "
                        "(a serving step mixing prompt chunks and decodes; LxN: N of length L; e.g. --prompt-lens "
                        "128x8 --chunk 128 --decode-lens 200x32), then decode with the others")
    p.add_argument("--policy", default=None,
                   help=f"scheduling policy passed to the instruction builder (default: the engine's, "
                        f"{EngineConfig.policy})")
    p.add_argument("--num-sms", type=_positive_int, default=None,
                   help=f"SMs to schedule for (vm only; default {DEFAULT_SIMULATED_SMS}, an H100's or H200's)")
    p.add_argument("--page-size", type=_positive_int, default=EngineConfig.page_size, help="KV page size (tokens)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    p.add_argument("--quantization", default=None, choices=["fp8"],
                   help="cuda: fp8 weights (one scale per output channel), as LLM(quantization=...) loads them")
    add_kernel_option_argument(p)  # the same A/B knobs as bench (SplitParams fields also shape VM timelines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="per-SM Gantt / Perfetto trace / summary of decode steps",
                       description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=run)


def _load_collector() -> Callable[[argparse.Namespace], ProfileRecord]:
    # Imported on use: the collector pulls in torch and the instruction builder, re-rendering needs neither.
    try:
        from engine.profiling import collect_profile
    except ModuleNotFoundError as e:
        if e.name in ("engine", "engine.profiling"):
            raise RuntimeError("live profiling is not available in this build (engine.profiling is missing); "
                               "re-render an existing profile with --from DIR/raw.npz") from None
        raise RuntimeError(f"engine.profiling could not be imported: {e}") from None
    except ImportError as e:
        raise RuntimeError(f"engine.profiling has no collect_profile(args) function ({e})") from None
    return collect_profile


def _render(args: argparse.Namespace) -> int:
    from profiler.render import ARTIFACTS, render_all  # matplotlib: only load it when profiling

    if getattr(args, "compare", None) is not None:
        from profiler.compare import COMPARE_ARTIFACTS, write_compare

        a, b = args.compare
        print(write_compare(load_npz(a), load_npz(b), str(a), str(b), args.out), end="")
        print(f"wrote {', '.join(COMPARE_ARTIFACTS)} to {args.out}/")
        return 0
    if args.from_npz is not None:
        source = raw_path(args.from_npz)
        record = load_npz(source)
        # Re-rendering into the source directory must not rewrite the raw data it came from.
        same = args.out.resolve() / RAW_NAME == source.resolve()
        summary = render_all(record, args.out, save_raw=not same)
    else:
        if args.model is None and args.preset is None:
            print("megakernel profile: error: give --model DIR, --preset NAME, --from DIR/raw.npz or --compare A B",
                  file=sys.stderr)
            return EXIT_USER_ERROR
        record = _load_collector()(args)
        summary = render_all(record, args.out)
    print(summary.text(), end="")
    print(f"wrote {', '.join(ARTIFACTS)} to {args.out}/")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return _render(args)
    except (ProfileFormatError, RuntimeError, ValueError, OSError) as e:
        if getattr(args, "debug", False):
            raise  # `megakernel --debug profile ...`: the CLI prints the traceback
        lines = str(e).strip().splitlines()
        print(f"megakernel profile: error: {lines[0] if lines else type(e).__name__}", file=sys.stderr)
        return EXIT_USER_ERROR


def main(argv: list[str] | None = None) -> int:
    """The subcommand on its own (tests, scripts): `main(["--from", "DIR/raw.npz", "--out", "DIR2"])`."""
    parser = argparse.ArgumentParser(prog="megakernel profile", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))
