"""How long the kernel's watchdog lets one dependency wait last before it reports a deadlock.

Why: a consumer that waits longer than `timeout_ns` for a counter records ERR_COUNTER_TIMEOUT and the step fails
naming the instruction, so a missing signal becomes an error instead of a hang. Most waits last microseconds, but
the wait for a layer's ATTN_DONE lasts as long as that layer's attention, which grows with query tokens x context x
heads x head dim: on the CUDA-core path (csrc/interpreter/attention_global.cuh: head_dim 32 and 256, or
attn_tiles=0), which walks a chunk's queries one after another, a 13.6k-token chunk over a 30k-token context at
head_dim 256 outlasted the 2 s default. So a step's allowance is the larger of the default and its attention work
at the CUDA-core path's rate, pessimistically.
"""
from __future__ import annotations

import torch

DEFAULT_TIMEOUT_NS = 2_000_000_000
# ns per (query token x key x head dim) on one SM: about 15x the CUDA-core path's measured rate (H200: that chunk's
# two layers took 4.2 s, 0.33 ns per product and SM), so only a wait far beyond its work (a deadlock) reaches it.
ATTENTION_NS_PER_PRODUCT = 5.0


def attention_products(query_start: torch.Tensor, context_lens: torch.Tensor, n_heads: int, head_dim: int) -> int:
    """Query-key dim products of a step's attention for one layer: each sequence's new tokens x its context x the
    query heads x the head dim (an upper bound: causal masking skips about half of a chunk's own keys)."""
    q = (query_start[1:] - query_start[:-1]).to(torch.int64)
    return int((q * context_lens.to(torch.int64)).sum()) * n_heads * head_dim


def step_timeout_ns(base_ns: int, products: int, num_sms: int) -> int:
    """The watchdog's limit for a step with `products` attention products per layer spread over `num_sms` SMs."""
    return max(base_ns, int(ATTENTION_NS_PER_PRODUCT * products / max(1, num_sms)))
