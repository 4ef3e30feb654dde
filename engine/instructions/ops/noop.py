"""NOOP: padding of static queues; an SM stops at the first NOOP of its queue. Touches and costs nothing."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from engine.instructions.accesses import Access
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class Noop:
    OPERANDS: ClassVar[tuple[str, ...]] = ()
    header: Header = field(default_factory=Header)


def execute(i: Noop, b: Buffers) -> None:
    return None


def accesses(i: Noop, b: Buffers) -> list[Access]:
    return []


def cost(i: Noop, c: CostInputs) -> InstrCost:
    return InstrCost(0, 0, 0)


SPEC = OpSpec("NOOP", Noop, execute, accesses, cost)
