"""The VM's global memory: every buffer of `engine/instructions/layout.py` as a torch tensor.

Accumulating writes (the atomic adds of DOWN_RESIDUAL into `hidden`, of ATTN_O_PROJ into `mid` and
`hidden`) are deferred and applied in instruction-id order when the buffer is next touched by a
non-accumulating access. On the GPU the add order is whatever the atomics give; in a race-free stream
every such add is ordered before that next access, so deferring is legal and makes the VM's result
independent of the interleaving it picked.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.instructions.fp8_packing import dequantized_rows
from engine.instructions.layout import ModelDims, StepShape, activation_specs, qkv_row_map
from engine.instructions.step_args import StepArgsView
from engine.instructions.tp_exchange import TpExchange
from models.llama.kv_cache import quantize_kv


@dataclass
class RowMaps:
    """Precomputed packed-row -> (kind, head, original dim) maps for W_qkv (see layout.qkv_row_map)."""

    kind: np.ndarray
    head: np.ndarray
    dim: np.ndarray

    @staticmethod
    def build(d: ModelDims) -> RowMaps:
        k, h, dd = qkv_row_map(d)
        return RowMaps(k, h, dd)


@dataclass
class GlobalBuffers:
    dims: ModelDims
    weights: dict[str, torch.Tensor]
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    act: dict[str, torch.Tensor]
    rows: RowMaps
    args: StepArgsView | None = None
    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None  # an fp8 cache's (k_scale, v_scale) [layers, kv_heads]
    tp: TpExchange | None = None  # this rank's tensor-parallel exchange (engine/vm/rank_group.py); None: one rank
    _pending: dict[str, list[tuple[int, tuple[slice, ...], torch.Tensor]]] = field(default_factory=dict)

    @staticmethod
    def allocate(dims: ModelDims, weights: dict[str, torch.Tensor], k_cache: torch.Tensor, v_cache: torch.Tensor,
                 shape: StepShape, num_splits: int, lm_blocks: int, seed: int = 0,
                 kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> GlobalBuffers:
        """Activations start as random garbage (never zeros) so a read-before-write cannot pass silently."""
        g = torch.Generator().manual_seed(seed)
        act: dict[str, torch.Tensor] = {}
        for spec in activation_specs(dims, shape, num_splits, lm_blocks):
            if spec.dtype == "int32":
                act[spec.name] = torch.randint(-5, 5, spec.shape, generator=g, dtype=torch.int32)
            else:  # bfloat16 ones too: the VM is the fp32 semantics of a stream, the GPU rounds where it stores
                act[spec.name] = torch.randn(spec.shape, generator=g, dtype=torch.float32) * 1e3
        return GlobalBuffers(dims, weights, k_cache, v_cache, act, RowMaps.build(dims), kv_scales=kv_scales)

    def w(self, name: str) -> torch.Tensor:
        return self.weights[name]

    def kv_read(self, which: int, layer: int, pages: torch.Tensor, group: int, rows: torch.Tensor) -> torch.Tensor:
        """Rows of the K (`which` 0) or V (1) cache as float32 values (an fp8 cache's times its head's scale)."""
        cache = self.k_cache if which == 0 else self.v_cache
        x = cache[layer, pages, group, rows].to(torch.float32)
        return x if self.kv_scales is None else x * self.kv_scales[which][layer, group]

    def kv_write(self, which: int, index: tuple[object, ...], layer: int, group: int, value: torch.Tensor) -> None:
        """Store float `value` at `index` of the K (0) or V (1) cache (an fp8 cache's divided by its head's scale)."""
        cache = self.k_cache if which == 0 else self.v_cache
        if self.kv_scales is not None:
            value = quantize_kv(value, self.kv_scales[which][layer, group])
        cache[index] = value.to(cache.dtype)  # type: ignore[index]

    def matrix(self, name: str, *index: object) -> torch.Tensor:
        """Rows (and columns) of weight matrix `name` as float32 values, scaled where it is fp8."""
        return dequantized_rows(self.weights, name, index)

    def accumulate(self, name: str, instr_id: int, index: tuple[slice, ...], value: torch.Tensor) -> None:
        self._pending.setdefault(name, []).append((instr_id, index, value))

    def get(self, name: str) -> torch.Tensor:
        """The activation buffer, with any deferred accumulations applied in instruction-id order."""
        pending = self._pending.pop(name, None)
        buf = self.act[name]
        if pending:
            for _, index, value in sorted(pending, key=lambda p: p[0]):
                buf[index] += value
        return buf
