"""TP_ARGMAX: each sequence's greedy token over a vocabulary split between the ranks of a tensor-parallel group.

In a step that needs no logits (greedy decode), each rank's LM head computes only its share of the vocabulary rows
(SplitParams.tp_vocab_rank; the rows [r V / N, (r + 1) V / N) of the whole LM head every rank holds), so a rank
reads 1 / N of the LM head. This op then takes the argmax twice, as the GPU runs it
(csrc/interpreter/ops/tp_argmax.cuh), through engine/instructions/tp_exchange.py's memory:

- publish, once the LM head's blocks are done: this rank's best (value, vocab id) per sequence, over its blocks
  (ties: the smaller id), into its own `best` row of every rank, and its publish count (index 2 layers) to every rank;
- reduce, once every rank has published as often: the best over the ranks, the first rank attaining it on a tie; as
  the ranks' vocabulary shares ascend, ties go to the smallest id, as ARGMAX_REDUCE's do. Every rank writes the same
  out_tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, CrossRank, OpSpec
from engine.instructions.ops.argmax_reduce import blocks_best
from engine.instructions.tp_exchange import argmax_flag_index


@dataclass(frozen=True)
class TpArgmax:
    """out_tokens[s] = the argmax over every rank's `num_blocks` LM-head partials (ties -> smallest vocab id)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("num_blocks",)
    num_blocks: int
    header: Header = field(default_factory=Header)


def _count(b: Buffers, src: int) -> int:
    ex = b.tp
    assert ex is not None
    return int(ex.flags[argmax_flag_index(b.dims.layers, src, ex.world)])


def publish(i: TpArgmax, b: Buffers) -> None:
    ex = b.tp
    if ex is None:
        return
    S = b.args.num_seqs
    if S > ex.best_value.shape[1]:
        raise ValueError(f"TP_ARGMAX: a step of {S} sequences, the exchange holds {ex.best_value.shape[1]}")
    values, ids = blocks_best(b, i.num_blocks)  # this rank's, over its blocks
    for peer in ex.peers:
        peer.best_value[ex.rank, :S] = values
        peer.best_id[ex.rank, :S] = ids
    count = _count(b, ex.rank) + 1
    for peer in ex.peers:
        peer.flags[argmax_flag_index(b.dims.layers, ex.rank, ex.world)] = count


def ready(i: TpArgmax, b: Buffers) -> bool:
    ex = b.tp
    if ex is None:
        return True
    own = _count(b, ex.rank)
    return all(_count(b, q) >= own for q in range(ex.world))


def execute(i: TpArgmax, b: Buffers) -> None:
    ex = b.tp
    out = b.get("out_tokens")
    if ex is None:  # one rank: its own blocks are the whole vocabulary
        out[:] = blocks_best(b, i.num_blocks)[1]
        return
    S = b.args.num_seqs
    # the first rank attaining the max (NaN the largest, as torch.argmax and the kernel's tk::beats): the smallest id
    q = ex.best_value[:, :S].argmax(dim=0)
    out[:S] = ex.best_id[:, :S].gather(0, q[None])[0]


def accesses(i: TpArgmax, b: Buffers) -> list[Access]:
    """Its own rank's regions; what it reads of the other ranks is ordered by their publish counts, not counters."""
    S = b.args.num_seqs
    return [Access("lm_part", "r", (box((0, S), (0, i.num_blocks)),)),
            Access("out_tokens", "w", (box((0, S)),))]


def cost(i: TpArgmax, c: CostInputs) -> InstrCost:
    S, world = c.shape.num_seqs, c.dims.tp_world
    return InstrCost(0, S * (i.num_blocks * 8 + world * 16), 0)


SPEC = OpSpec("TP_ARGMAX", TpArgmax, execute, accesses, cost, cross_rank=CrossRank(publish, ready))
