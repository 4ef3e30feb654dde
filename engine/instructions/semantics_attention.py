"""Reference semantics of ATTN_PARTIAL and ATTN_REDUCE (split-KV causal attention over paged K/V) and of
ATTN_O_PROJ (unsplit attention of a head range fused with its slice of the O-projection)."""
from __future__ import annotations

import torch

from engine.instructions import opcodes as op


def split_pages(context_len: int, page_size: int, split: int, num_splits: int) -> tuple[int, int]:
    """Block-table index range [lo, hi) of split `split`: pages P = ceil(C / ps) cut as k*P//n."""
    P = -(-context_len // page_size)
    return split * P // num_splits, (split + 1) * P // num_splits


def group_cols(d, g: int) -> slice:  # noqa: ANN001
    """Columns of q / attn_out / o_part holding the G query heads of KV group g."""
    return slice(g * d.gqa * d.head_dim, (g + 1) * d.gqa * d.head_dim)


def head_cols(d, i: op.AttnPartial) -> slice:  # noqa: ANN001
    """Columns of q / attn_out / o_part holding heads [head_begin, head_end) of the instruction's group."""
    first = i.kv_group * d.gqa
    return slice((first + i.head_begin) * d.head_dim, (first + i.head_end) * d.head_dim)


def _partial(i: op.AttnPartial, b):  # noqa: ANN001, ANN202
    d, a, layer = b.dims, b.args, i.header.layer
    q0, q1 = a.query_start[i.seq], a.query_start[i.seq + 1]
    C, ps = a.context_lens[i.seq], a.page_size
    lo, hi = split_pages(C, ps, i.split, i.num_splits)
    n, G, hd = q1 - q0, i.head_end - i.head_begin, d.head_dim
    q = b.get("q")[q0:q1, head_cols(d, i)].view(n, G, hd).transpose(0, 1)  # [G, n, hd]
    key_pos = torch.arange(lo * ps, min(hi * ps, C))
    pages = a.block_tables[i.seq, key_pos // ps]
    rows = key_pos % ps
    k = b.k_cache[layer, pages, i.kv_group, rows].to(torch.float32)  # [nk, hd]
    v = b.v_cache[layer, pages, i.kv_group, rows].to(torch.float32)
    scores = (q @ k.T) * hd ** -0.5  # [G, n, nk]
    visible = key_pos[None, :] <= a.positions[q0:q1][:, None]  # [n, nk]
    scores = scores.masked_fill(~visible[None], float("-inf"))
    m = scores.amax(dim=-1, keepdim=True) if key_pos.numel() else torch.full((G, n, 1), float("-inf"))
    any_key = torch.isfinite(m)
    p = torch.exp(scores - torch.where(any_key, m, torch.zeros_like(m)))
    s = p.sum(dim=-1, keepdim=True)
    o = torch.where(any_key, (p @ v) / torch.where(any_key, s, torch.ones_like(s)), torch.zeros(()))
    lse = torch.where(any_key, m + torch.log(torch.where(any_key, s, torch.ones_like(s))), m)
    return q0, q1, o.transpose(0, 1).reshape(n, G * hd), lse[..., 0].transpose(0, 1)  # [n, G*hd], [n, G]


def attn_partial(i: op.AttnPartial, b) -> None:  # noqa: ANN001
    d = b.dims
    q0, q1, o, lse = _partial(i, b)
    cols = head_cols(d, i)
    if i.num_splits == 1:
        b.get("attn_out")[q0:q1, cols] = o
        return
    b.get("o_part")[i.split, q0:q1, cols] = o
    first = i.kv_group * d.gqa
    b.get("lse_part")[i.split, q0:q1, first + i.head_begin:first + i.head_end] = lse


def attn_reduce(i: op.AttnReduce, b) -> None:  # noqa: ANN001
    d, a = b.dims, b.args
    q0, q1 = a.query_start[i.seq], a.query_start[i.seq + 1]
    n, G, hd, ns = q1 - q0, d.gqa, d.head_dim, i.num_splits
    o = b.get("o_part")[:ns, q0:q1, group_cols(d, i.kv_group)].view(ns, n, G, hd)
    lse = b.get("lse_part")[:ns, q0:q1, i.kv_group * G:(i.kv_group + 1) * G]  # [ns, n, G]
    M = lse.amax(dim=0, keepdim=True)  # every query sees key 0 in split 0's range or later: M is finite
    w = torch.exp(lse - M)
    out = (w[..., None] * o).sum(dim=0) / w.sum(dim=0)[..., None]
    b.get("attn_out")[q0:q1, group_cols(d, i.kv_group)] = out.reshape(n, G * hd)


def attn_o_proj(i: op.AttnOProj, b) -> None:  # noqa: ANN001
    d, layer, attn = b.dims, i.header.layer, i.attention()
    q0, q1, o, _ = _partial(attn, b)
    rows = slice(i.row_begin, i.row_end)
    delta = o @ b.w("w_o")[layer, rows, head_cols(d, attn)].to(torch.float32).T  # [n, rows]
    # Other head ranges add into the same rows (atomics on the GPU): mid starts as the layer input
    # (QKV's copies) and hidden already is it, so both end as h + attn · Wo^T once every range has added.
    region = (slice(q0, q1), rows)
    b.accumulate("mid", i.header.instr_id, region, delta)
    b.accumulate("hidden", i.header.instr_id, region, delta)
