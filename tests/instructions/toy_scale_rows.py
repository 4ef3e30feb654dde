"""SCALE_ROWS, a toy opcode added the way docs/ADDING_AN_OPCODE.md says (tests/instructions/test_toy_opcode.py
runs it): hidden[:, r] *= 2 for the step's tokens and the rows r of [row_begin, row_end). Its CUDA side is
toy_scale_rows.cuh beside this file."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class ScaleRows:
    """hidden[:, r] *= 2 for every token of the step, r in [row_begin, row_end)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end")
    row_begin: int
    row_end: int
    header: Header = field(default_factory=Header)


def execute(i: ScaleRows, b: Buffers) -> None:
    T = b.args.num_tokens
    b.get("hidden")[:T, i.row_begin: i.row_end] *= 2


def accesses(i: ScaleRows, b: Buffers) -> list[Access]:
    region = (box((0, b.args.num_tokens), (i.row_begin, i.row_end)),)
    return [Access("hidden", "r", region), Access("hidden", "w", region)]


def cost(i: ScaleRows, c: CostInputs) -> InstrCost:
    n = c.shape.num_tokens * (i.row_end - i.row_begin)
    return InstrCost(0, 2 * n * 4, n)


SPEC = OpSpec("SCALE_ROWS", ScaleRows, execute, accesses, cost)
