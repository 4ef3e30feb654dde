"""ARGMAX_REDUCE: each sequence's greedy token, the argmax over the LM head's per-block partials."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class ArgmaxReduce:
    """out_tokens[s] = argmax over the `num_blocks` LM-head partials (ties -> smallest vocab id)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("num_blocks",)
    num_blocks: int
    header: Header = field(default_factory=Header)


def blocks_best(b: Buffers, num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's best logit and its vocab id over the LM head's `num_blocks` partials."""
    mx = b.get("lm_max")[:, :num_blocks]
    arg = b.get("lm_arg")[:, :num_blocks]
    best = mx.argmax(dim=1)  # first block attaining the max = smallest vocab id (blocks are in vocab order)
    return mx.gather(1, best[:, None])[:, 0], arg.gather(1, best[:, None])[:, 0]


def execute(i: ArgmaxReduce, b: Buffers) -> None:
    b.get("out_tokens")[:] = blocks_best(b, i.num_blocks)[1]


def accesses(i: ArgmaxReduce, b: Buffers) -> list[Access]:
    S = b.args.num_seqs
    return [Access("lm_part", "r", (box((0, S), (0, i.num_blocks)),)),
            Access("out_tokens", "w", (box((0, S)),))]


def cost(i: ArgmaxReduce, c: CostInputs) -> InstrCost:
    return InstrCost(0, c.shape.num_seqs * i.num_blocks * 8, 0)


SPEC = OpSpec("ARGMAX_REDUCE", ArgmaxReduce, execute, accesses, cost)
