"""Reference attention shared by the attention opcodes (ATTN_PARTIAL, ATTN_REDUCE, ATTN_O_PROJ): which KV
pages a split covers, which q / attn_out columns a head range owns, the split-KV causal attention of one
task over paged K/V, and the regions that attention reads."""
from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from engine.instructions.accesses import Access, box, runs
from engine.instructions.format import Header
from engine.instructions.layout import ModelDims
from engine.instructions.op_spec import Buffers


class AttentionTask(Protocol):
    """Sequence `seq`'s new tokens, q heads [head_begin, head_end) of `kv_group` (within the group's G heads),
    over split `split` of `num_splits` of its KV pages (an ATTN_PARTIAL, or an ATTN_O_PROJ's attention())."""

    seq: int
    kv_group: int
    split: int
    num_splits: int
    head_begin: int
    head_end: int
    q_part: int  # part q_part of q_parts of the sequence's new tokens (query_tokens)
    q_parts: int
    header: Header


def split_pages(context_len: int, page_size: int, split: int, num_splits: int) -> tuple[int, int]:
    """Block-table index range [lo, hi) of split `split`: pages P = ceil(C / ps) cut as k*P//n."""
    P = -(-context_len // page_size)
    return split * P // num_splits, (split + 1) * P // num_splits


def group_cols(d: ModelDims, g: int) -> slice:
    """Columns of q / attn_out / o_part holding the G query heads of KV group g."""
    return slice(g * d.gqa * d.head_dim, (g + 1) * d.gqa * d.head_dim)


def head_cols(d: ModelDims, i: AttentionTask) -> slice:
    """Columns of q / attn_out / o_part holding heads [head_begin, head_end) of the instruction's group."""
    first = i.kv_group * d.gqa
    return slice((first + i.head_begin) * d.head_dim, (first + i.head_end) * d.head_dim)


def seq_tokens(b: Buffers, seq: int) -> tuple[int, int]:
    """The step-token range [t0, t1) of sequence `seq`'s live tokens (StepArgsView.live_end)."""
    return b.args.query_start[seq], b.args.live_end(seq)


def query_tokens(b: Buffers, i: AttentionTask) -> tuple[int, int]:
    """The step-token range [q0, q1) of task i: part q_part of q_parts of its sequence's tokens, cut n * k // parts
    (as csrc/interpreter/attention_global.cuh attend cuts them)."""
    t0, t1 = seq_tokens(b, i.seq)
    n = t1 - t0
    return t0 + n * i.q_part // i.q_parts, t0 + n * (i.q_part + 1) // i.q_parts


def partial_attention(i: AttentionTask, b: Buffers) -> tuple[int, int, torch.Tensor, torch.Tensor]:
    """(q0, q1, o [n, G*hd], lse [n, G]) of task i: its tokens' causal attention over its split's keys."""
    d, a, layer = b.dims, b.args, i.header.layer
    q0, q1 = query_tokens(b, i)
    C, ps = a.context_lens[i.seq], a.page_size
    lo, hi = split_pages(C, ps, i.split, i.num_splits)
    n, G, hd = q1 - q0, i.head_end - i.head_begin, d.head_dim
    q = b.get("q")[q0:q1, head_cols(d, i)].view(n, G, hd).transpose(0, 1)  # [G, n, hd]
    key_pos = torch.arange(lo * ps, min(hi * ps, C))
    pages = a.block_tables[i.seq, key_pos // ps]
    rows = key_pos % ps
    k = b.kv_read(0, layer, pages, i.kv_group, rows)  # [nk, hd]
    v = b.kv_read(1, layer, pages, i.kv_group, rows)
    scores = (q @ k.T) * d.model_head_dim ** -0.5  # [G, n, nk]: the checkpoint's scale (padded dims add 0)
    visible = key_pos[None, :] <= a.positions[q0:q1][:, None]  # [n, nk]
    scores = scores.masked_fill(~visible[None], float("-inf"))
    m = scores.amax(dim=-1, keepdim=True) if key_pos.numel() else torch.full((G, n, 1), float("-inf"))
    any_key = torch.isfinite(m)
    p = torch.exp(scores - torch.where(any_key, m, torch.zeros_like(m)))
    s = p.sum(dim=-1, keepdim=True)
    o = torch.where(any_key, (p @ v) / torch.where(any_key, s, torch.ones_like(s)), torch.zeros(()))
    lse = torch.where(any_key, m + torch.log(torch.where(any_key, s, torch.ones_like(s))), m)
    return q0, q1, o.transpose(0, 1).reshape(n, G * hd), lse[..., 0].transpose(0, 1)  # [n, G*hd], [n, G]


def attention_reads(i: AttentionTask, b: Buffers) -> list[Access]:
    """The queries of the task's heads and tokens, and the K/V slots of its split."""
    d, a, layer = b.dims, b.args, i.header.layer
    t0, t1 = query_tokens(b, i)
    hd, g = d.head_dim, i.kv_group
    C, ps = a.context_lens[i.seq], a.page_size
    lo, hi = split_pages(C, ps, i.split, i.num_splits)
    slots = [int(a.block_tables[i.seq, j]) * ps + r for j in range(lo, hi) for r in range(min(ps, C - j * ps))]
    cols = head_cols(d, i)
    out = [Access("q", "r", (box((t0, t1), (cols.start, cols.stop)),))]
    if slots:
        kv = (box((layer, layer + 1), runs(np.array(slots)), (g, g + 1), (0, hd)),)
        out += [Access("k_cache", "r", kv), Access("v_cache", "r", kv)]
    return out
