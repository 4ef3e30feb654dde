"""ATTN_O_PROJ: batch-1 attention of a head range fused with its slice of the O-projection, added atomically
into mid and hidden (the fused path: no attn_out round trip, no O-proj wait for all of the layer's attention)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.attention_math import attention_reads, head_cols, partial_attention, seq_tokens
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec
from engine.instructions.ops import attn_partial
from engine.instructions.ops.attn_partial import AttnPartial


@dataclass(frozen=True)
class AttnOProj:
    """Batch-1 attention fused with its O-projection slice: o = the causal attention of sequence `seq`'s
    tokens for q heads [head_begin, head_end) of `kv_group` (as one unsplit ATTN_PARTIAL), then
    delta = o · W_o[r, those heads' columns]^T for rows r in [row_begin, row_end), added (atomically)
    into both mid and hidden. Saves the attn_out round trip and the O-proj's wait for all attention."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("seq", "kv_group", "head_begin", "head_end", "row_begin", "row_end")
    seq: int
    kv_group: int
    head_begin: int
    head_end: int
    row_begin: int
    row_end: int
    header: Header = field(default_factory=Header)

    def attention(self) -> AttnPartial:
        """The attention part as the unsplit ATTN_PARTIAL it equals (semantics, accesses and cost share it)."""
        return AttnPartial(self.seq, self.kv_group, 0, 1, self.head_begin, self.head_end, header=self.header)


def execute(i: AttnOProj, b: Buffers) -> None:
    d, layer, attn = b.dims, i.header.layer, i.attention()
    q0, q1, o, _ = partial_attention(attn, b)
    rows = slice(i.row_begin, i.row_end)
    delta = o @ b.matrix("w_o", layer, rows, head_cols(d, attn)).T  # [n, rows]
    # Other head ranges add into the same rows (atomics on the GPU): mid starts as the layer input
    # (QKV's copies) and hidden already is it, so both end as h + attn · Wo^T once every range has added.
    region = (slice(q0, q1), rows)
    b.accumulate("mid", i.header.instr_id, region, delta)
    b.accumulate("hidden", i.header.instr_id, region, delta)


def accesses(i: AttnOProj, b: Buffers) -> list[Access]:
    t0, t1 = seq_tokens(b, i.seq)
    rows = (box((t0, t1), (i.row_begin, i.row_end)),)
    return attention_reads(i.attention(), b) + [Access("mid", "acc", rows), Access("hidden", "acc", rows)]


def cost(i: AttnOProj, c: CostInputs) -> InstrCost:
    """The unsplit attention of its heads plus the matvec over those heads' W_o columns, whose result
    is added into mid and hidden (two accumulations per row and token)."""
    attn = attn_partial.cost(i.attention(), c)
    q_len = c.tokens_per_seq
    rows, k = i.row_end - i.row_begin, (i.head_end - i.head_begin) * c.dims.head_dim
    return InstrCost(attn.weight_bytes + rows * k * c.weight_bytes, attn.act_bytes + 2 * q_len * rows * 4,
                     attn.flops + 2 * q_len * rows * k)


SPEC = OpSpec("ATTN_O_PROJ", AttnOProj, execute, accesses, cost)
