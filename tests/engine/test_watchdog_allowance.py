"""The watchdog's allowance (engine/cuda/watchdog.py): the default for ordinary steps, more for long prompt chunks."""
from __future__ import annotations

import torch

from engine.cuda.watchdog import DEFAULT_TIMEOUT_NS, attention_products, step_timeout_ns


def test_products_count_each_sequences_queries_times_its_context() -> None:
    qs = torch.tensor([0, 1, 5, 15])  # 1, 4 and 10 new tokens
    ctx = torch.tensor([100, 4, 30])
    assert attention_products(qs, ctx, n_heads=2, head_dim=8) == (100 + 16 + 300) * 16


def test_decode_steps_keep_the_default() -> None:
    qs = torch.arange(0, 65)
    ctx = torch.full((64,), 8192)
    assert step_timeout_ns(DEFAULT_TIMEOUT_NS, attention_products(qs, ctx, 32, 128), 132) == DEFAULT_TIMEOUT_NS


def test_a_long_chunk_over_a_long_context_gets_more() -> None:
    qs = torch.tensor([0, 13616])
    ctx = torch.tensor([30000])
    allowance = step_timeout_ns(DEFAULT_TIMEOUT_NS, attention_products(qs, ctx, 8, 256), 132)
    assert allowance > 5 * DEFAULT_TIMEOUT_NS
