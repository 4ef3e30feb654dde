"""Lab: GPU time of one sampling step (engine/sampling) per setting, fused kernel vs torch ops, 1B vocabulary.
Prints one line per setting:

    python -m dev.sampling_timing [vocab] [rows] [SETTING ...] [--kernel-only] [--steps N] [--logits randn|peaked]
                                  [--pdl]

--pdl launches the kernel with programmatic dependent launch, as the engine's runs of decode steps do (back to back
here, so each launch's start overlaps the one before it: the per-step time of a loop, not one launch's).

SETTING is any of SETTINGS' names (default: all). Under ncu, time one launch of one setting with
`ncu -k regex:sample_rows --launch-skip 3 --launch-count 1 --metrics gpu__time_duration.sum
python -m dev.sampling_timing 128256 1 bench_row --kernel-only` (3 warm-up launches precede the timed ones)."""
from __future__ import annotations

import argparse

import torch

from engine.cuda_build import load_extension
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, RunSampler
from engine.sampling_params import SamplingParams

WARMUP = 3
SETTINGS = {
    "greedy": SamplingParams(temperature=0.0),
    "greedy+penalty": SamplingParams(temperature=0.0, repetition_penalty=1.1),
    "temperature": SamplingParams(temperature=0.8),
    "penalty": SamplingParams(temperature=0.8, repetition_penalty=1.1),
    "min_p": SamplingParams(temperature=0.8, min_p=0.05),
    "top_k": SamplingParams(temperature=0.8, top_k=50),
    "top_k_256": SamplingParams(temperature=0.8, top_k=256),  # the largest top-k through candidates
    "top_k_1000": SamplingParams(temperature=0.8, top_k=1000),  # above it: the whole-row radix passes
    "top_p": SamplingParams(temperature=0.8, top_p=0.95),
    "top_k+top_p": SamplingParams(temperature=0.8, top_k=50, top_p=0.95),
    "bench_row": SamplingParams(temperature=0.8, top_p=0.95, top_k=50, repetition_penalty=1.1),
}


def make_logits(kind: str, rows: int, vocab: int, dev: torch.device) -> torch.Tensor:
    """randn: every token a candidate of the draw (the costliest draw); peaked: a model-like row, a few tokens far
    above a broad tail."""
    gen = torch.Generator(device=dev).manual_seed(0)
    logits = torch.randn((rows, vocab), generator=gen, device=dev) * 2
    if kind == "peaked":
        logits = logits * 1.5 - 5
        top = torch.randint(0, vocab, (rows, 32), generator=gen, device=dev)
        logits.scatter_(1, top, torch.rand((rows, 32), generator=gen, device=dev) * 8 + 12)
    return logits


def time_steps(sampler: RunSampler, logits: torch.Tensor, steps: int, pdl: bool) -> float:
    for i in range(WARMUP):
        sampler.step_and_advance(logits, i, pdl=pdl)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(steps):
        sampler.step_and_advance(logits, WARMUP + i, pdl=pdl)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vocab", nargs="?", type=int, default=128256)
    parser.add_argument("rows", nargs="?", type=int, default=1)
    parser.add_argument("settings", nargs="*", metavar="SETTING", help=f"of: {', '.join(SETTINGS)} (default: all)")
    parser.add_argument("--kernel-only", action="store_true", help="skip the torch ops (for ncu)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per setting")
    parser.add_argument("--logits", choices=("randn", "peaked"), default="randn")
    parser.add_argument("--pdl", action="store_true", help="launch the kernel with PDL")
    args = parser.parse_args()
    unknown = [name for name in args.settings if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
    dev = torch.device("cuda")
    module = load_extension("mk_interpreter")
    logits = make_logits(args.logits, args.rows, args.vocab, dev)
    noise = NoiseTables(args.vocab)
    history = TokenHistory(list(range(min(64, args.vocab))), [1 % args.vocab, 2 % args.vocab])
    for name in args.settings or SETTINGS:
        p = SETTINGS[name]
        times = []
        for kernel in (module,) if args.kernel_only else (module, None):
            s = RunSampler([p] * args.rows, list(range(args.rows)), [history] * args.rows, [0] * args.rows,
                           WARMUP + args.steps, noise, dev, kernel=kernel)
            times.append(time_steps(s, logits, args.steps, args.pdl))
        torch_ops = "" if args.kernel_only else f"   torch ops {times[1]:8.1f} us"
        print(f"{name:14s} vocab {args.vocab} rows {args.rows}: kernel {times[0]:8.1f} us{torch_ops}", flush=True)


if __name__ == "__main__":
    main()
