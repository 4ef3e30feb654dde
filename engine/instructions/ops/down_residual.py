"""DOWN_RESIDUAL: a row block of the MLP's down projection over one K-slice, added atomically into hidden."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class DownResidual:
    """hidden[:, r] += act[:, k_begin:k_end] · W_down[r, k_begin:k_end]^T (atomic add), r in rows."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end", "k_begin", "k_end", "slice")
    row_begin: int
    row_end: int
    k_begin: int
    k_end: int
    slice: int
    header: Header = field(default_factory=Header)


def execute(i: DownResidual, b: Buffers) -> None:
    T, layer = b.args.num_tokens, i.header.layer
    k = slice(i.k_begin, i.k_end)
    y = b.get("act")[:T, k] @ b.matrix("w_down", layer, slice(i.row_begin, i.row_end), k).T
    b.accumulate("hidden", i.header.instr_id, (slice(0, T), slice(i.row_begin, i.row_end)), y)


def accesses(i: DownResidual, b: Buffers) -> list[Access]:
    T = b.args.num_tokens
    return [Access("act", "r", (box((0, T), (i.k_begin, i.k_end)),)),
            Access("hidden", "acc", (box((0, T), (i.row_begin, i.row_end)),))]


def cost(i: DownResidual, c: CostInputs) -> InstrCost:
    T, r, k = c.shape.num_tokens, i.row_end - i.row_begin, i.k_end - i.k_begin
    return InstrCost(r * k * c.weight_bytes, T * k * 4 + 2 * T * r * 4, 2 * T * r * k)


SPEC = OpSpec("DOWN_RESIDUAL", DownResidual, execute, accesses, cost)
