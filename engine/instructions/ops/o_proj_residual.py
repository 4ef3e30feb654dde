"""O_PROJ_RESIDUAL: a row block of the attention output projection plus the residual, into mid and hidden."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class OProjResidual:
    """mid[:, r] = hidden[:, r] + attn_out · W_o[r]^T and hidden[:, r] = mid[:, r], r in [row_begin, row_end)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end")
    row_begin: int
    row_end: int
    header: Header = field(default_factory=Header)


def execute(i: OProjResidual, b: Buffers) -> None:
    T, layer, r = b.args.num_tokens, i.header.layer, slice(i.row_begin, i.row_end)
    y = b.get("attn_out")[:T] @ b.matrix("w_o", layer, r).T
    hidden = b.get("hidden")
    mid = b.get("mid")
    mid[:T, r] = hidden[:T, r] + y
    hidden[:T, r] = mid[:T, r]


def accesses(i: OProjResidual, b: Buffers) -> list[Access]:
    T = b.args.num_tokens
    rows = box((0, T), (i.row_begin, i.row_end))
    return [Access("attn_out", "r", (box((0, T), (0, b.dims.q_cols)),)), Access("hidden", "r", (rows,)),
            Access("mid", "w", (rows,)), Access("hidden", "w", (rows,))]


def cost(i: OProjResidual, c: CostInputs) -> InstrCost:
    T, Q, r = c.shape.num_tokens, c.dims.q_cols, i.row_end - i.row_begin
    return InstrCost(r * Q * c.weight_bytes, T * Q * 4 + 3 * T * r * 4, 2 * T * r * Q)


SPEC = OpSpec("O_PROJ_RESIDUAL", OProjResidual, execute, accesses, cost)
