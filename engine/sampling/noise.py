"""Counter-based sampling noise: the uniform draw for token v of a request's n-th generated token is a hash
of (request key, n, v). It needs no generator state, so a seeded request draws the same tokens whatever batch,
run of decode steps or preemption it goes through, and the CPU and the GPU draw bit-identical noise (32-bit
integer arithmetic, kept exact inside int64 tensors).
"""
from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
KEY_END = 2**64  # a key is a 64-bit unsigned integer; a seed maps to seed mod 2**64


def _mul32(x: torch.Tensor | int, c: int) -> torch.Tensor | int:
    """(x * c) mod 2**32 for x < 2**32, in two 16-bit halves of c so no int64 product overflows."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & MASK32


def mix32(x: torch.Tensor | int) -> torch.Tensor | int:
    """A 32-bit integer hash with good avalanche (two multiply-xorshift rounds)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def seed_key(seed: int) -> int:
    """The noise key of a request seed (any int SamplingParams accepts)."""
    return seed % KEY_END


def row_hashes(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """int64 [S]: one hash word per row from its key ([S, 2], `split_keys`) and its counter (int64 [S])."""
    h = mix32(counters & MASK32)
    h = mix32(keys[:, 1] ^ h)
    return mix32(keys[:, 0] ^ h)


def split_keys(keys: list[int], device: torch.device) -> torch.Tensor:
    """int64 [S, 2]: each 64-bit key as (low 32 bits, high 32 bits)."""
    return torch.tensor([[k & MASK32, (k >> 32) & MASK32] for k in keys], dtype=torch.int64, device=device)


def token_hashes(vocab: int, device: torch.device) -> torch.Tensor:
    """int64 [V]: the hash of each token index (the same for every row and step, so built once)."""
    return mix32(torch.arange(vocab, dtype=torch.int64, device=device))


def gumbel(row_hash: torch.Tensor, token_hash: torch.Tensor) -> torch.Tensor:
    """float32 [S, V] standard Gumbel noise: -log(-log(u)) with u in (0, 1) from 23 bits of the hash (so that
    m + 0.5 is exact in float32 and u never rounds to 1)."""
    h = mix32(row_hash[:, None] ^ token_hash[None, :])
    u = ((h >> 9).to(torch.float32) + 0.5) * (1.0 / 2**23)
    return -torch.log(-torch.log(u))
