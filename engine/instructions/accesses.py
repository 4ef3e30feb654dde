"""Buffer regions each opcode reads and writes, for the VM's race detector.

A region is a union of products; a product gives, per buffer dimension, a sorted list of disjoint
(lo, hi) runs (so a prefill's thousands of KV slots stay a handful of runs). KV caches are indexed
(layer, slot = page * page_size + row, kv_head, dim). Kinds: "r" read, "w" plain write, "acc"
accumulating write (commutes with other "acc" to the same place, conflicts with "r" and "w").
Regions that depend on step args (KV slots, a sequence's tokens) are computed from the live args,
exactly as the interpreter computes its addresses. Weights are read-only and not tracked.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.instructions import opcodes as op
from engine.instructions.semantics_attention import head_cols, split_pages

Runs = tuple[tuple[int, int], ...]
Box = tuple[Runs, ...]  # one run list per dimension


@dataclass(frozen=True)
class Access:
    buffer: str
    kind: str  # "r" | "w" | "acc"
    boxes: tuple[Box, ...]


def box(*dims: tuple[int, int] | list[tuple[int, int]]) -> Box:
    """A product region; each dim is one (lo, hi) range or a list of runs."""
    return tuple(tuple(d) if isinstance(d, list) else (d,) for d in dims)


def runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Sorted distinct ints -> maximal [lo, hi) runs."""
    v = np.unique(values)
    if v.size == 0:
        return []
    breaks = np.nonzero(np.diff(v) != 1)[0]
    starts = np.concatenate(([v[0]], v[breaks + 1]))
    ends = np.concatenate((v[breaks], [v[-1]])) + 1
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def _qkv(i: op.RmsQkvRopeAppend, b) -> list[Access]:  # noqa: ANN001
    d, a, layer = b.dims, b.args, i.header.layer
    T = a.num_tokens
    kind = b.rows.kind[i.row_begin: i.row_end]
    head = b.rows.head[i.row_begin: i.row_end]
    dim = b.rows.dim[i.row_begin: i.row_end]
    acc = [Access("hidden", "r", (box((0, T), (0, d.hidden)),))]
    q = kind == 0
    if q.any():
        acc.append(Access("q", "w", (box((0, T), runs(head[q] * d.head_dim + dim[q])),)))
    slots = runs(a.slot_mapping.numpy())
    for k, name in ((1, "k_cache"), (2, "v_cache")):
        m = kind == k
        if m.any():
            acc.append(Access(name, "w", (box((layer, layer + 1), slots, (i.kv_group, i.kv_group + 1),
                                              runs(dim[m])),)))
    if i.copy_end > i.copy_begin:
        acc.append(Access("mid", "w", (box((0, T), (i.copy_begin, i.copy_end)),)))
    return acc


def _seq_tokens(b, seq: int) -> tuple[int, int]:  # noqa: ANN001
    return b.args.query_start[seq], b.args.query_start[seq + 1]


def _attn_reads(i: op.AttnPartial, b) -> list[Access]:  # noqa: ANN001
    """The queries of the instruction's heads and tokens, and the K/V slots of its split."""
    d, a, layer = b.dims, b.args, i.header.layer
    t0, t1 = _seq_tokens(b, i.seq)
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


def _attn(i: op.AttnPartial, b) -> list[Access]:  # noqa: ANN001
    d = b.dims
    t0, t1 = _seq_tokens(b, i.seq)
    heads = (i.kv_group * d.gqa + i.head_begin, i.kv_group * d.gqa + i.head_end)
    c = head_cols(d, i)
    cols = (c.start, c.stop)
    out = _attn_reads(i, b)
    if i.num_splits == 1:
        out.append(Access("attn_out", "w", (box((t0, t1), cols),)))
    else:
        out.append(Access("o_part", "w", (box((i.split, i.split + 1), (t0, t1), cols),)))
        out.append(Access("lse_part", "w", (box((i.split, i.split + 1), (t0, t1), heads),)))
    return out


def _attn_o_proj(i: op.AttnOProj, b) -> list[Access]:  # noqa: ANN001
    t0, t1 = _seq_tokens(b, i.seq)
    rows = (box((t0, t1), (i.row_begin, i.row_end)),)
    return _attn_reads(i.attention(), b) + [Access("mid", "acc", rows), Access("hidden", "acc", rows)]


def _reduce(i: op.AttnReduce, b) -> list[Access]:  # noqa: ANN001
    d = b.dims
    t0, t1 = _seq_tokens(b, i.seq)
    G, hd, g = d.gqa, d.head_dim, i.kv_group
    cols = (g * G * hd, (g + 1) * G * hd)
    return [Access("o_part", "r", (box((0, i.num_splits), (t0, t1), cols),)),
            Access("lse_part", "r", (box((0, i.num_splits), (t0, t1), (g * G, (g + 1) * G)),)),
            Access("attn_out", "w", (box((t0, t1), cols),))]


def accesses(instr: op.Instruction, b) -> list[Access]:  # noqa: ANN001
    """The regions `instr` touches under the current step args of `b` (GlobalBuffers)."""
    d, a = b.dims, b.args
    T, S, H = a.num_tokens, a.num_seqs, d.hidden
    all_h = box((0, T), (0, H))
    if isinstance(instr, op.Embed):
        return [Access("hidden", "w", (box((instr.tok_begin, instr.tok_end), (0, H)),))]
    if isinstance(instr, op.RmsQkvRopeAppend):
        return _qkv(instr, b)
    if isinstance(instr, op.AttnPartial):
        return _attn(instr, b)
    if isinstance(instr, op.AttnReduce):
        return _reduce(instr, b)
    if isinstance(instr, op.AttnOProj):
        return _attn_o_proj(instr, b)
    if isinstance(instr, op.OProjResidual):
        rows = box((0, T), (instr.row_begin, instr.row_end))
        return [Access("attn_out", "r", (box((0, T), (0, d.q_cols)),)), Access("hidden", "r", (rows,)),
                Access("mid", "w", (rows,)), Access("hidden", "w", (rows,))]
    if isinstance(instr, op.RmsGateUpSilu):
        return [Access("mid", "r", (all_h,)), Access("act", "w", (box((0, T), (instr.i_begin, instr.i_end)),))]
    if isinstance(instr, op.DownResidual):
        return [Access("act", "r", (box((0, T), (instr.k_begin, instr.k_end)),)),
                Access("hidden", "acc", (box((0, T), (instr.row_begin, instr.row_end)),))]
    if isinstance(instr, op.LmHead):
        last = runs(np.array(a.query_start[1:]) - 1)
        return [Access("hidden", "r", (box(last, (0, H)),)),
                Access("logits", "w", (box((0, S), (instr.v_begin, instr.v_end)),)),
                Access("lm_part", "w", (box((0, S), (instr.block, instr.block + 1)),))]
    if isinstance(instr, op.ArgmaxReduce):
        return [Access("lm_part", "r", (box((0, S), (0, instr.num_blocks)),)),
                Access("out_tokens", "w", (box((0, S)),))]
    return []
