"""ATTN_REDUCE: the log-sum-exp merge of one (sequence, KV group)'s split-KV attention partials into attn_out."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.attention_math import group_cols, seq_tokens
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec


@dataclass(frozen=True)
class AttnReduce:
    """Log-sum-exp merge of the `num_splits` partials of (seq, kv_group) into attn_out."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("seq", "kv_group", "num_splits")
    seq: int
    kv_group: int
    num_splits: int
    header: Header = field(default_factory=Header)


def execute(i: AttnReduce, b: Buffers) -> None:
    d = b.dims
    q0, q1 = seq_tokens(b, i.seq)
    n, G, hd, ns = q1 - q0, d.gqa, d.head_dim, i.num_splits
    o = b.get("o_part")[:ns, q0:q1, group_cols(d, i.kv_group)].view(ns, n, G, hd)
    lse = b.get("lse_part")[:ns, q0:q1, i.kv_group * G:(i.kv_group + 1) * G]  # [ns, n, G]
    M = lse.amax(dim=0, keepdim=True)  # every query sees key 0 in split 0's range or later: M is finite
    w = torch.exp(lse - M)
    out = (w[..., None] * o).sum(dim=0) / w.sum(dim=0)[..., None]
    b.get("attn_out")[q0:q1, group_cols(d, i.kv_group)] = out.reshape(n, G * hd)
    b.get("attn_bf16")[q0:q1, group_cols(d, i.kv_group)] = out.reshape(n, G * hd)  # O's tiles' input


def accesses(i: AttnReduce, b: Buffers) -> list[Access]:
    d = b.dims
    t0, t1 = seq_tokens(b, i.seq)
    G, hd, g = d.gqa, d.head_dim, i.kv_group
    cols = (g * G * hd, (g + 1) * G * hd)
    return [Access("o_part", "r", (box((0, i.num_splits), (t0, t1), cols),)),
            Access("lse_part", "r", (box((0, i.num_splits), (t0, t1), (g * G, (g + 1) * G)),)),
            Access("attn_out", "w", (box((t0, t1), cols),)), Access("attn_bf16", "w", (box((t0, t1), cols),))]


def cost(i: AttnReduce, c: CostInputs) -> InstrCost:
    d = c.dims
    return InstrCost(0, (i.num_splits + 1) * c.tokens_per_seq * d.gqa * (d.head_dim + 1) * 4, 0)


SPEC = OpSpec("ATTN_REDUCE", AttnReduce, execute, accesses, cost)
