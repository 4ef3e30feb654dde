"""Profile the last step of the bench's on-device decode loop (GPU only).

`megakernel profile` times steps that the host prepares one by one, with other kernels (prefill, step-args
set-up) between them; the bench queues megakernel launches back to back. This runs the bench's loop
(engine/bench/megakernel_runner.decode_on_device) with timing compiled in for every launch, so the last step's
records show the kernel in the bench's conditions, and prints its summary (layer spans included).
  python3 -m dev.profile_device_loop [--preset llama-3.2-1b] [--prompt-len 32] [--steps 16] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from dev.knobs import backend_knobs
from engine.backends.cuda_backend import CudaBackend
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from engine.bench.model_source import load_bench_weights
from engine.cuda.profile import record_from_timing
from profiler.record import save_npz
from profiler.summary import render_text, summarize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama-3.2-1b")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--out", default=None, help="also write raw.npz here")
    args = ap.parse_args()
    weights, desc = load_bench_weights(None, args.preset, torch.bfloat16, torch.device("cuda"))
    prompt = torch.randint(0, weights.config.vocab_size, (args.prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    pages = -(-(args.prompt_len + args.steps) // PAGE_SIZE)
    knobs = backend_knobs(os.environ)
    backend = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE, **knobs)  # type: ignore[arg-type]
    backend.timing = True  # every launch of the loop runs the timing instantiation
    _, seconds = decode_on_device(backend, prompt, args.steps)
    meta = {"model": desc, "backend": "cuda", "batch": 1, "prompt_len": args.prompt_len, "steps": args.steps,
            "step": args.steps - 1, "policy": backend.policy, "num_sms": backend.num_sms, "kernel_options": "device loop",
            "gpu": torch.cuda.get_device_name()}
    record = record_from_timing(backend.last, int(backend.module.TIMING_MARK0), meta)
    print(f"device loop: {seconds * 1e3:.3f} ms/token with timing on ({args.steps} steps)")
    print(render_text(summarize(record)))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        save_npz(record, Path(args.out) / "raw.npz")


if __name__ == "__main__":
    main()
