"""Lab: GPU time of one sampling step (engine/sampling) per setting, fused kernel vs torch ops, 1B vocabulary.
Prints one line per setting; `python -m dev.sampling_timing [vocab] [rows]`."""
from __future__ import annotations

import sys

import torch

from engine.cuda_build import load_extension
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, RunSampler
from engine.sampling_params import SamplingParams

SETTINGS = {
    "greedy": SamplingParams(temperature=0.0),
    "temperature": SamplingParams(temperature=0.8),
    "top_p": SamplingParams(temperature=0.8, top_p=0.95),
    "top_k": SamplingParams(temperature=0.8, top_k=50),
    "top_k+top_p": SamplingParams(temperature=0.8, top_k=50, top_p=0.95),
    "penalty": SamplingParams(temperature=0.8, repetition_penalty=1.1),
    "bench row": SamplingParams(temperature=0.8, top_p=0.95, top_k=50, repetition_penalty=1.1),
}


def time_steps(sampler: RunSampler, logits: torch.Tensor, steps: int) -> float:
    for i in range(3):
        sampler.step(logits, i)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(steps):
        sampler.step(logits, i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / steps


def main() -> None:
    vocab = int(sys.argv[1]) if len(sys.argv) > 1 else 128256
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    dev = torch.device("cuda")
    module = load_extension("mk_interpreter")
    logits = torch.randn((rows, vocab), device=dev) * 2
    noise = NoiseTables(vocab)
    for name, p in SETTINGS.items():
        row = []
        for kernel in (module, None):
            s = RunSampler([p] * rows, list(range(rows)), [TokenHistory(list(range(64)), [1, 2])] * rows,
                           [0] * rows, 64, noise, dev, kernel=kernel)
            row.append(time_steps(s, logits, 50))
        print(f"{name:12s} vocab {vocab} rows {rows}: kernel {row[0]:8.1f} us   torch ops {row[1]:8.1f} us", flush=True)


if __name__ == "__main__":
    main()
