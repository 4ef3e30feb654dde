"""Greedy decoding with the reference model (models.llama.model) over a paged KV cache."""
from __future__ import annotations

import torch

from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights

PAGE = 16


def reference_greedy(weights: LlamaWeights, prompt: list[int], new_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """Prefill the whole prompt in one step, then decode; returns the new tokens and each step's logits."""
    model = LlamaModel(weights)
    total = len(prompt) + new_tokens
    pages = -(-total // PAGE)
    kv = PagedKVCache.allocate(weights.config, pages, PAGE, dtype=weights.dtype)
    table = [list(range(pages))]
    tokens: list[int] = []
    logits_seq: list[torch.Tensor] = []
    logits = model.forward(StepBatch.build([prompt], [0], table, page_size=PAGE), kv)
    for step in range(new_tokens):
        logits_seq.append(logits[0])
        tokens.append(int(logits[0].argmax()))
        if step + 1 < new_tokens:
            batch = StepBatch.build([[tokens[-1]]], [len(prompt) + step], table, page_size=PAGE)
            logits = model.forward(batch, kv)
    return tokens, logits_seq
