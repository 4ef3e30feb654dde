"""Paged KV cache storage: `k`, `v` of shape [num_layers, num_pages, num_kv_heads, page_size, head_dim].

Position p of a sequence lives in page block_table[p // page_size], row p % page_size. Which pages a
sequence owns is decided by the block manager; this class only stores rows and reads them back.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from models.llama.config import LlamaConfig
from models.llama.step_batch import StepBatch


@dataclass(frozen=True)
class PagedKVCache:
    k: torch.Tensor
    v: torch.Tensor

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
    ) -> PagedKVCache:
        """`head_dim`: the width of a stored head, where a backend stores heads wider than the config's (zero-padded
        dims: engine/instructions/head_padding.py); default the config's."""
        if num_pages <= 0 or page_size <= 0:
            raise ValueError(f"PagedKVCache.allocate: num_pages={num_pages} and page_size={page_size} must be > 0")
        shape = (config.num_hidden_layers, num_pages, config.num_key_value_heads, page_size, head_dim or config.head_dim)
        return PagedKVCache(torch.zeros(shape, dtype=dtype, device=device),
                            torch.zeros(shape, dtype=dtype, device=device))

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
        self.k[layer][pages, :, rows] = k_new.to(self.k.dtype)
        self.v[layer][pages, :, rows] = v_new.to(self.v.dtype)

    def gather(self, layer: int, block_table: torch.Tensor, context_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V [context_len, kv_heads, head_dim] of one sequence, read through its block table."""
        pos = torch.arange(context_len, device=block_table.device)
        pages = block_table[pos // self.page_size].to(torch.int64)
        rows = pos % self.page_size
        return self.k[layer][pages, :, rows], self.v[layer][pages, :, rows]
