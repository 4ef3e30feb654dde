"""ATTN_PARTIAL: causal attention of one sequence's new tokens, for a range of one KV group's query heads,
over one split of its KV pages (split-KV: the partials meet in ATTN_REDUCE unless there is one split)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from engine.instructions.accesses import Access, box
from engine.instructions.attention_math import attention_reads, head_cols, partial_attention, query_tokens
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec
from engine.instructions.query_units import resolve


@dataclass(frozen=True)
class AttnPartial:
    """Causal attention of sequence `seq`'s new tokens for q heads [head_begin, head_end) of `kv_group`
    (indices within the group's G heads) over split `split` of `num_splits` of its KV pages (range
    computed from context_lens at run time). Cutting a group's heads over several instructions puts
    otherwise idle SMs to work on short contexts, at the price of reading the group's K/V once each."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("seq", "kv_group", "split", "num_splits", "head_begin", "head_end",
                                           "q_part", "q_parts", "spread")
    seq: int
    kv_group: int
    split: int
    num_splits: int
    head_begin: int
    head_end: int
    # Part q_part of q_parts of the sequence's new tokens (cut at run time as n * k // q_parts): a prompt chunk's
    # tokens over several instructions, each causal over the same keys.
    q_part: int = 0
    q_parts: int = 1
    # 1: unit q_part of the step's q_parts query units (seq unused), which the step args deal out over the sequences
    # by their attention work (engine/instructions/query_units.py); one split only.
    spread: int = 0
    header: Header = field(default_factory=Header)


def execute(i: AttnPartial, b: Buffers) -> None:
    d = b.dims
    task = resolve(i, b.args.query_units)
    if task is None:  # a unit past the step's work
        return
    i = task
    q0, q1, o, lse = partial_attention(i, b)
    cols = head_cols(d, i)
    if i.num_splits == 1:
        b.get("attn_out")[q0:q1, cols] = o
        b.get("attn_bf16")[q0:q1, cols] = o  # O's tiles' input (rounded to bf16)
        return
    b.get("o_part")[i.split, q0:q1, cols] = o
    first = i.kv_group * d.gqa
    b.get("lse_part")[i.split, q0:q1, first + i.head_begin:first + i.head_end] = lse


def accesses(i: AttnPartial, b: Buffers) -> list[Access]:
    d = b.dims
    task = resolve(i, b.args.query_units)
    if task is None:
        return []
    i = task
    t0, t1 = query_tokens(b, i)
    heads = (i.kv_group * d.gqa + i.head_begin, i.kv_group * d.gqa + i.head_end)
    c = head_cols(d, i)
    cols = (c.start, c.stop)
    out = attention_reads(i, b)
    if i.num_splits == 1:
        out.append(Access("attn_out", "w", (box((t0, t1), cols),)))
        out.append(Access("attn_bf16", "w", (box((t0, t1), cols),)))
    else:
        out.append(Access("o_part", "w", (box((i.split, i.split + 1), (t0, t1), cols),)))
        out.append(Access("lse_part", "w", (box((i.split, i.split + 1), (t0, t1), heads),)))
    return out


def cost(i: AttnPartial, c: CostInputs) -> InstrCost:
    """K and V of the split's keys up to the part's last token (at the build-time context length), the queries and
    outputs of its heads, and the products of each query with the keys before it: a prompt chunk's later parts
    attend to more keys (causal), so its parts' costs differ and the scheduler starts the long ones first."""
    n, hd = c.tokens_per_seq, c.dims.head_dim
    ctx = c.context_lens[i.seq] if i.seq < len(c.context_lens) else n
    if i.spread:  # any sequence's unit: the step's tokens over its units, at the mean context
        n = max(1, c.shape.num_tokens // i.q_parts)
        ctx = max(n, sum(c.context_lens) // max(1, len(c.context_lens)))
        i = replace(i, q_part=0, q_parts=1)
    t0, t1 = n * i.q_part // i.q_parts, n * (i.q_part + 1) // i.q_parts
    q_len = max(1, t1 - t0)
    before = max(0, ctx - n)  # keys cached before this step's tokens
    keys = max(1, (before + t1) // i.num_splits)
    mean_keys = max(1, (2 * before + t0 + t1 + 1) // (2 * i.num_splits))  # a query attends to the keys up to it
    heads = i.head_end - i.head_begin
    return InstrCost(2 * keys * hd * c.kv_bytes, 2 * q_len * heads * hd * 4, 4 * q_len * heads * mean_keys * hd)


SPEC = OpSpec("ATTN_PARTIAL", AttnPartial, execute, accesses, cost)
