"""A few megakernel steps (prefill chunk + decode) on a small random model, for compute-sanitizer, then the
bench's on-device loop (ARGMAX_REDUCE advancing the step args and writing the next step's embedding rows), then
two steps of many tokens that run as TILE_MATMUL tiles (a prompt chunk beside 23 decodes, then 24 decodes with the
LM head as tiles). The cuda backend's MEGAKERNEL_* knobs apply (dev/knobs.py; e.g. MEGAKERNEL_FUSE_O_PROJ=1 checks
the fused path). Usage (GPU machine): python3 -m dev.sanitize_step [--tiles] (--tiles: the tile steps only), under
compute-sanitizer (scripts/gpu_check.sh sanitize, sanitize-tiles)."""
from __future__ import annotations

import os
import sys

import torch

from dev.knobs import backend_knobs
from engine.backends.cuda_backend import CudaBackend
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from models.llama.config import LlamaConfig
from models.llama.init_random import random_state_dict
from models.llama.step_batch import StepBatch
from models.llama.weights import weights_from_state_dict


def main() -> None:
    # hidden and intermediate whole 128-element chunks: the prompt chunk's matvecs take the several-row
    # tensor-core path (csrc/interpreter/dot_tokens_mma.cuh), the decodes the one-row one
    cfg = LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=64, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True)
    weights = weights_from_state_dict(cfg, random_state_dict(cfg, seed=0), dtype=torch.bfloat16, device="cuda")
    knobs = backend_knobs(os.environ)
    knobs.pop("policy", None)
    if "--tiles" not in sys.argv:
        one_sequence_steps(weights, knobs)
    tile_steps(weights, knobs)


def tile_steps(weights: object, knobs: dict[str, object]) -> None:
    """A 30-token prompt chunk beside 23 one-token decodes (53 tokens), then 24 decodes: steps of more than one
    token group, so every linear layer runs as tiles (NORM, QKV, O, GATE_UP, DOWN; the decode step's LM head too)."""
    for policy in ("lpt", "dynamic"):
        be = CudaBackend(weights, num_pages=64, page_size=PAGE_SIZE, policy=policy, pad_steps=False, **knobs)
        tables = [[2 * s, 2 * s + 1] for s in range(24)]
        toks = [list(range(1, 31))] + [[7 + s] for s in range(1, 24)]
        starts = [0] + [5] * 23
        ids = be.greedy(StepBatch.build(toks, starts, tables, device="cuda", page_size=PAGE_SIZE))
        assert be.last is not None and be.last.compiled.stream.plan.tiles is not None, "the step ran no tiles"
        nxt = [[int(t)] for t in ids.tolist()]
        ids = be.greedy(StepBatch.build(nxt, [30] + [6] * 23, tables, device="cuda", page_size=PAGE_SIZE))
        print(f"tiles {policy}: ok, tokens {ids.tolist()[:4]}...")


def one_sequence_steps(weights: object, knobs: dict[str, object]) -> None:
    for policy in ("lpt", "dynamic"):
        be = CudaBackend(weights, num_pages=8, page_size=PAGE_SIZE, policy=policy, **knobs)
        table = [3, 1, 6]
        ids = be.greedy(StepBatch.build([[5, 9, 2, 7]], [0], [table], device="cuda", page_size=PAGE_SIZE))
        for pos in range(4, 20):
            ids = be.greedy(StepBatch.build([[int(ids[0])]], [pos], [table], device="cuda", page_size=PAGE_SIZE))
        print(f"{policy}: ok, last token {int(ids[0])}")
    loop = CudaBackend(weights, num_pages=2, page_size=PAGE_SIZE, embed_in_stream=False,
                       **{**knobs, "fold_advance": True, "fold_embed": True})
    tokens, _ = decode_on_device(loop, [5, 9, 2, 7], 12)
    print(f"device loop: ok, tokens {tokens}")


if __name__ == "__main__":
    main()
