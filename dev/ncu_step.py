"""A few decode steps of the Llama-3.2-1B shape on the megakernel, for Nsight Compute.

`dev/ncu_stalls.sh` / `dev/ncu_source.sh` profile one of these launches (after warm-up) and print why warps
stalled; the share of "no instruction" stalls is the instruction-cache pressure of the interpreter's hot path.
Batch 1 runs the decode loop the bench times; a larger batch runs that many sequences of 128 tokens of context
(their KV pages hold whatever the pool holds: timing only) as one step per launch, the tile steps of batched decode.
A prompt length as the third argument makes each launch one prefill step of that many tokens (one sequence from
position 0: the tile steps of a chunked prompt).
Usage: python3 -m dev.ncu_step [steps] [batch] [prompt-len]"""
from __future__ import annotations

import sys

import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch

CONTEXT = 128  # tokens of context of each sequence of a batched step

if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    prompt_len = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    cfg = preset_config("llama-3.2-1b")
    weights = random_weights(cfg, torch.bfloat16, torch.device("cuda"), seed=0)
    if prompt_len > 0:
        pages = -(-prompt_len // PAGE_SIZE)
        be = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE)
        step = StepBatch.build([list(range(1, prompt_len + 1))], [0], [list(range(pages))], device="cuda",
                               page_size=PAGE_SIZE)
        for _ in range(steps):
            be.greedy(step)
        torch.cuda.synchronize()
        print(f"{steps} prefill steps of {prompt_len} tokens (under the profiler: not a benchmark)")
    elif batch == 1:
        be = CudaBackend(weights, num_pages=-(-(32 + steps) // PAGE_SIZE), page_size=PAGE_SIZE)
        _tokens, sec = decode_on_device(be, list(range(1, 33)), steps)
        print(f"{steps} decode steps, {sec * 1e3:.3f} ms/token (under the profiler: not a benchmark)")
    else:
        per_seq = -(-(CONTEXT + 1) // PAGE_SIZE)
        be = CudaBackend(weights, num_pages=batch * per_seq, page_size=PAGE_SIZE)
        tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(batch)]
        step = StepBatch.build([[1]] * batch, [CONTEXT] * batch, tables, device="cuda", page_size=PAGE_SIZE)
        for _ in range(steps):
            be.greedy(step)
        torch.cuda.synchronize()
        print(f"{steps} decode steps of {batch} sequences (under the profiler: not a benchmark)")
