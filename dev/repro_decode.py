"""Batch-1 decode on the megakernel with schedule options, for compute-sanitizer / repro runs:
python3 -m dev.repro_decode [--preset llama-3.2-1b] [--waves 2] [--splits 1] [--tokens 16]"""
from __future__ import annotations

import argparse

import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from models.llama.presets import preset_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="llama-3.2-1b")
    ap.add_argument("--waves", type=float, default=1.0)
    ap.add_argument("--splits", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--policy", default="dynamic")
    a = ap.parse_args()
    cfg = preset_config(a.preset)
    weights = random_weights(cfg, torch.bfloat16, torch.device("cuda"), seed=0)
    options = {"max_attn_splits": a.splits} if a.splits else {}
    prompt = list(range(1, 33))
    pages = -(-(len(prompt) + a.tokens) // PAGE_SIZE)
    be = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE, policy=a.policy, waves=a.waves, **options)
    tokens, sec = decode_on_device(be, prompt, a.tokens)
    print(f"waves={a.waves} splits={a.splits}: {sec * 1e3:.3f} ms/token, tokens {tokens[:8]}...")


if __name__ == "__main__":
    main()
