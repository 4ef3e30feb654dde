"""EMBED: the step's token embeddings, hidden[t, :] = embed[token_ids[t], :] (fp32) for a token range."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class Embed:
    """hidden[t, :] = embed[token_ids[t], :] for step tokens t in [tok_begin, tok_end)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("tok_begin", "tok_end")
    tok_begin: int
    tok_end: int
    header: Header = field(default_factory=Header)


def execute(i: Embed, b: Buffers) -> None:
    ids = b.args.token_ids[i.tok_begin: i.tok_end]
    b.get("hidden")[i.tok_begin: i.tok_end] = b.matrix("embed", ids)


def accesses(i: Embed, b: Buffers) -> list[Access]:
    return [Access("hidden", "w", (box((i.tok_begin, i.tok_end), (0, b.dims.hidden)),))]


def cost(i: Embed, c: CostInputs) -> InstrCost:
    n, H = i.tok_end - i.tok_begin, c.dims.hidden
    return InstrCost(n * H * c.weight_bytes, n * H * 4, 0)


SPEC = OpSpec("EMBED", Embed, execute, accesses, cost)
