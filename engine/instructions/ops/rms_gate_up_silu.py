"""RMS_GATE_UP_SILU: a block of the MLP's intermediate columns, silu(gate) * up of RMSNorm(mid), into act."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec
from engine.instructions.rmsnorm import rms


@dataclass(frozen=True)
class RmsGateUpSilu:
    """act[:, i] = silu(gate_i) * up_i for intermediate columns i in [i_begin, i_end) (inside `slice`),
    with gate/up = RMSNorm(mid) · W^T read from the interleaved W_gate_up."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("i_begin", "i_end", "slice")
    i_begin: int
    i_end: int
    slice: int
    header: Header = field(default_factory=Header)


def execute(i: RmsGateUpSilu, b: Buffers) -> None:
    d, T, layer = b.dims, b.args.num_tokens, i.header.layer
    x = rms(b.get("mid")[:T], b.w("mlp_norm")[layer], d.eps)
    y = x @ b.matrix("w_gate_up", layer, slice(2 * i.i_begin, 2 * i.i_end)).T
    y = y.view(T, -1, 2, d.gu_tile)
    b.get("act")[:T, i.i_begin: i.i_end] = (F.silu(y[:, :, 0]) * y[:, :, 1]).reshape(T, -1)


def accesses(i: RmsGateUpSilu, b: Buffers) -> list[Access]:
    T = b.args.num_tokens
    return [Access("mid", "r", (box((0, T), (0, b.dims.hidden)),)),
            Access("act", "w", (box((0, T), (i.i_begin, i.i_end)),))]


def cost(i: RmsGateUpSilu, c: CostInputs) -> InstrCost:
    T, H, r = c.shape.num_tokens, c.dims.hidden, 2 * (i.i_end - i.i_begin)
    return InstrCost(r * H * c.weight_bytes, T * H * 4 + T * r * 2, 2 * T * r * H)


SPEC = OpSpec("RMS_GATE_UP_SILU", RmsGateUpSilu, execute, accesses, cost)
