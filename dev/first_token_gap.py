"""When `megakernel bench` reports the megakernel's tokens DIFFER from the reference at some step: is it
a bf16 near-tie? Replays the bench's weights and prompt for a preset (same seeds), prefills both the
megakernel and the torch reference model, then for the first N greedy steps (both fed the reference's
tokens) prints each side's argmax and the reference's logit gap between its max and the megakernel's
choice. Usage (GPU machine): python3 -m dev.first_token_gap llama-3.1-8b [steps]"""
from __future__ import annotations

import sys

import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from engine.bench.megakernel_runner import PAGE_SIZE
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


@torch.inference_mode()
def main(preset: str, steps: int, prompt_len: int = 32, seed: int = 0) -> None:
    cfg = preset_config(preset)
    dev = torch.device("cuda")
    weights = random_weights(cfg, torch.bfloat16, dev, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)  # as engine/bench/harness.py
    prompt = torch.randint(0, cfg.vocab_size, (prompt_len,), generator=gen).tolist()
    pages = -(-(prompt_len + steps) // PAGE_SIZE)
    table = list(range(pages))
    mk = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE)
    ref, ref_kv = LlamaModel(weights), PagedKVCache.allocate(cfg, pages, PAGE_SIZE, torch.bfloat16, dev)
    mk.prefill(prompt[:-1], table)
    ref.forward(StepBatch.build([prompt[:-1]], [0], [table], device=dev, page_size=PAGE_SIZE), ref_kv)
    tok, pos = prompt[-1], prompt_len - 1
    for i in range(steps):
        batch = StepBatch.build([[tok]], [pos], [table], device=dev, page_size=PAGE_SIZE)
        a, b = mk.forward(batch)[0].float(), ref.forward(batch, ref_kv)[0].float()
        top2 = torch.topk(b, 2)
        ma, rb = int(a.argmax()), int(b.argmax())
        print(f"step {i}: megakernel {ma}, reference {rb}, reference gap max-chosen "
              f"{float(b.max() - b[ma]):.4f}, reference top-2 gap {float(top2.values[0] - top2.values[1]):.4f}, "
              f"max |logit diff| {float((a - b).abs().max()):.3f}")
        tok, pos = rb, pos + 1


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
