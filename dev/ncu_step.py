"""A few batch-1 decode steps of the Llama-3.2-1B shape on the megakernel, for Nsight Compute.

`dev/ncu_stalls.sh` profiles one of these launches (after warm-up) and prints why warps stalled;
the share of "no instruction" stalls is the instruction-cache pressure of the interpreter's hot path.
Usage: python3 -m dev.ncu_step [steps]"""
from __future__ import annotations

import sys

import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from models.llama.presets import preset_config

if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    cfg = preset_config("llama-3.2-1b")
    weights = random_weights(cfg, torch.bfloat16, torch.device("cuda"), seed=0)
    be = CudaBackend(weights, num_pages=-(-(32 + steps) // PAGE_SIZE), page_size=PAGE_SIZE)
    _tokens, sec = decode_on_device(be, list(range(1, 33)), steps)
    print(f"{steps} decode steps, {sec * 1e3:.3f} ms/token (under the profiler: not a benchmark)")
