"""Paged KV cache storage: `k`, `v` of shape [num_layers, num_pages, num_kv_heads, page_size, head_dim].

Position p of a sequence lives in page block_table[p // page_size], row p % page_size. Which pages a
sequence owns is decided by the block manager; this class only stores rows and reads them back.

An fp8 cache (e4m3) stores k / scale and v / scale, with one scale per layer and KV head (`k_scale`, `v_scale`
[num_layers, num_kv_heads], float32; the backends derive them from the weights: models/llama/kv_scales.py), so a
head's rows can be written a few dims at a time, and reads them back times the scale: half the bytes of bf16, twice
the tokens per pool.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from models.llama.config import LlamaConfig
from models.llama.fp8 import FP8_DTYPE, FP8_MAX
from models.llama.step_batch import StepBatch


FP8_KV = FP8_DTYPE  # an fp8 cache's element dtype


def quantize_kv(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Values `x` as an fp8 cache stores them: divided by their heads' `scale` (broadcast), within e4m3's range."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_KV)


@dataclass(frozen=True)
class PagedKVCache:
    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor | None = None  # fp8 caches: [num_layers, num_kv_heads] float32
    v_scale: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.k.dim() != 5 or self.k.shape != self.v.shape:
            raise ValueError(
                f"PagedKVCache: k and v must both be [layers, pages, kv_heads, page_size, head_dim], "
                f"got {tuple(self.k.shape)} and {tuple(self.v.shape)}"
            )

    @staticmethod
    def allocate(
        config: LlamaConfig,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
        head_dim: int | None = None,
        scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> PagedKVCache:
        """`head_dim`: the width of a stored head, where a backend stores heads wider than the config's (zero-padded
        dims: engine/instructions/head_padding.py); default the config's. `scales`: an fp8 cache's (k_scale,
        v_scale) [num_layers, num_kv_heads] (models/llama/kv_scales.py); default 1."""
        if num_pages <= 0 or page_size <= 0:
            raise ValueError(f"PagedKVCache.allocate: num_pages={num_pages} and page_size={page_size} must be > 0")
        shape = (config.num_hidden_layers, num_pages, config.num_key_value_heads, page_size, head_dim or config.head_dim)
        stored: tuple[torch.Tensor | None, ...] = (None, None)
        if dtype == FP8_KV:
            given = scales or tuple(torch.ones(shape[0], shape[2]) for _ in range(2))
            if any(tuple(s.shape) != (shape[0], shape[2]) for s in given):
                raise ValueError(f"PagedKVCache.allocate: fp8 scales must be [{shape[0]}, {shape[2]}], got "
                                 f"{[list(s.shape) for s in given]}")
            stored = tuple(s.to(device=device, dtype=torch.float32).contiguous() for s in given)
        return PagedKVCache(torch.zeros(shape, dtype=dtype, device=device),
                            torch.zeros(shape, dtype=dtype, device=device), *stored)

    @property
    def num_layers(self) -> int:
        return int(self.k.shape[0])

    @property
    def num_pages(self) -> int:
        return int(self.k.shape[1])

    @property
    def page_size(self) -> int:
        return int(self.k.shape[3])

    @property
    def bytes_per_page(self) -> int:
        """Bytes of one page across all layers, K and V together."""
        per_layer = self.k.shape[2] * self.page_size * self.k.shape[4] * self.k.element_size()
        return 2 * self.num_layers * per_layer

    def slot_mapping(self, batch: StepBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(page id, row) int64 [T] where each new token of `batch` is stored."""
        lens = batch.query_start[1:] - batch.query_start[:-1]
        seq_of_token = torch.repeat_interleave(torch.arange(batch.num_seqs, device=lens.device), lens)
        page_index = batch.positions // self.page_size
        pages = batch.block_tables[seq_of_token, page_index].to(torch.int64)
        if bool((pages < 0).any()) or bool((pages >= self.num_pages).any()):
            bad = int(torch.nonzero((pages < 0) | (pages >= self.num_pages))[0, 0])
            raise ValueError(
                f"PagedKVCache: token {bad} (position {int(batch.positions[bad])}) maps to page "
                f"{int(pages[bad])}, outside [0, {self.num_pages})"
            )
        return pages, batch.positions % self.page_size

    def write(self, layer: int, pages: torch.Tensor, rows: torch.Tensor,
              k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Store k_new / v_new [T, kv_heads, head_dim] at (pages[t], rows[t]) of `layer`."""
        # Advanced indices split by a slice put the token dim first: the target is [T, kv_heads, head_dim].
        self.k[layer][pages, :, rows] = self._stored(k_new, self.k_scale, layer)
        self.v[layer][pages, :, rows] = self._stored(v_new, self.v_scale, layer)

    def gather(self, layer: int, block_table: torch.Tensor, context_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V [context_len, kv_heads, head_dim] of one sequence, read through its block table."""
        pos = torch.arange(context_len, device=block_table.device)
        pages = block_table[pos // self.page_size].to(torch.int64)
        rows = pos % self.page_size
        return (self._read(self.k[layer][pages, :, rows], self.k_scale, layer),
                self._read(self.v[layer][pages, :, rows], self.v_scale, layer))

    def _stored(self, x: torch.Tensor, scale: torch.Tensor | None, layer: int) -> torch.Tensor:
        """x [T, kv_heads, head_dim] in the cache's dtype (fp8: divided by its heads' scales, within e4m3's range)."""
        if scale is None:
            return x.to(self.k.dtype)
        return quantize_kv(x, scale[layer][None, :, None])

    @staticmethod
    def _read(x: torch.Tensor, scale: torch.Tensor | None, layer: int) -> torch.Tensor:
        """Rows [n, kv_heads, head_dim] as values (fp8: float32, times their heads' scales)."""
        return x if scale is None else x.float() * scale[layer][None, :, None]
