"""RMS_QKV_ROPE_APPEND: a block of packed W_qkv rows of one KV group for every token of the step: RMSNorm(hidden)
times the rows, RoPE on the q and k rows, q rows into the q buffer, k and v rows into the paged KV cache at
each token's slot; on the fused path also a range of hidden's columns copied into mid."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box, runs
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec
from engine.instructions.rmsnorm import rms


@dataclass(frozen=True)
class RmsQkvRopeAppend:
    """Packed W_qkv rows [row_begin, row_end) of one KV group for all tokens: RMSNorm(hidden) · W^T,
    RoPE on q/k rows, q rows -> q buffer, k/v rows -> paged cache at each token's slot. Also
    mid[:, c] = hidden[:, c] for c in [copy_begin, copy_end) (empty unless ATTN_O_PROJ fuses the
    layer's O-proj: its accumulations into mid must start from the layer input, which QKV reads anyway)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end", "kv_group", "copy_begin", "copy_end")
    row_begin: int
    row_end: int
    kv_group: int
    copy_begin: int
    copy_end: int
    header: Header = field(default_factory=Header)


def execute(i: RmsQkvRopeAppend, b: Buffers) -> None:
    T = b.args.num_tokens
    write_qkv_rows(b, i.header.layer, i.row_begin, i.row_end, i.kv_group, 0, T)
    if i.copy_end > i.copy_begin:  # fused O-proj: mid starts as the layer input (see ATTN_O_PROJ)
        copy = slice(i.copy_begin, i.copy_end)
        b.get("mid")[:T, copy] = b.get("hidden")[:T, copy]


def write_qkv_rows(b: Buffers, layer: int, row_begin: int, row_end: int, kv_group: int, t0: int, t1: int,
                   source: str = "hidden") -> None:
    """Tokens [t0, t1): RMSNorm(hidden) times packed W_qkv rows [row_begin, row_end) of one KV group, RoPE on q/k
    rows, q rows into the q buffer, k/v rows into the paged cache at each token's slot. TILE_MATMUL's QKV tiles share
    it with `source` "x_bf16": the input already normalised."""
    d, a = b.dims, b.args
    if source == "hidden":
        x = rms(b.get("hidden")[t0:t1], b.w("attn_norm")[layer], d.eps)
    else:
        x = b.get(source)[t0:t1].to(torch.float32)
    y = x @ b.matrix("w_qkv", layer, slice(row_begin, row_end)).T  # [tokens, rows]
    kind = b.rows.kind[row_begin: row_end]
    head = b.rows.head[row_begin: row_end]
    dim = b.rows.dim[row_begin: row_end]
    rot = torch.from_numpy(kind < 2)
    if bool(rot.any()):
        # Packed rows come in adjacent rotate_half pairs (2i, 2i+1) = original dims (i, i + hd/2).
        pair = torch.arange(row_begin, row_end) % d.head_dim // 2
        ang = a.positions[t0:t1].to(torch.float32)[:, None] * b.w("rope_inv_freq")[pair][None, :]
        c, s = torch.cos(ang), torch.sin(ang)
        x0, x1 = y[:, 0::2], y[:, 1::2]
        c0, s0 = c[:, 0::2], s[:, 0::2]
        rotated = torch.stack((x0 * c0 - x1 * s0, x1 * c0 + x0 * s0), dim=-1).reshape(y.shape)
        y = torch.where(rot[None, :], rotated, y)
    kind_t, head_t, dim_t = (torch.from_numpy(v) for v in (kind, head, dim))
    qm = kind_t == 0
    if bool(qm.any()):
        b.get("q")[t0:t1, head_t[qm] * d.head_dim + dim_t[qm]] = y[:, qm]
    slots = a.slot_mapping[t0:t1]
    pages, rows = slots // a.page_size, slots % a.page_size
    for k in (1, 2):
        m = kind_t == k
        if bool(m.any()):
            dims = dim_t[m]
            b.kv_write(k - 1, (layer, pages[:, None], kv_group, rows[:, None], dims[None, :]), layer, kv_group,
                       y[:, m])


def accesses(i: RmsQkvRopeAppend, b: Buffers) -> list[Access]:
    T = b.args.num_tokens
    acc = qkv_rows_accesses(b, i.header.layer, i.row_begin, i.row_end, i.kv_group, 0, T)
    if i.copy_end > i.copy_begin:
        acc.append(Access("mid", "w", (box((0, T), (i.copy_begin, i.copy_end)),)))
    return acc


def qkv_rows_accesses(b: Buffers, layer: int, row_begin: int, row_end: int, kv_group: int, t0: int,
                      t1: int, source: str = "hidden") -> list[Access]:
    """What write_qkv_rows reads and writes."""
    d, a = b.dims, b.args
    kind = b.rows.kind[row_begin: row_end]
    head = b.rows.head[row_begin: row_end]
    dim = b.rows.dim[row_begin: row_end]
    acc = [Access(source, "r", (box((t0, t1), (0, d.hidden)),))]
    q = kind == 0
    if q.any():
        acc.append(Access("q", "w", (box((t0, t1), runs(head[q] * d.head_dim + dim[q])),)))
    slots = runs(a.slot_mapping[t0:t1].numpy())
    for k, name in ((1, "k_cache"), (2, "v_cache")):
        m = kind == k
        if m.any():
            acc.append(Access(name, "w", (box((layer, layer + 1), slots, (kv_group, kv_group + 1),
                                              runs(dim[m])),)))
    return acc


def cost(i: RmsQkvRopeAppend, c: CostInputs) -> InstrCost:
    T, H, r = c.shape.num_tokens, c.dims.hidden, i.row_end - i.row_begin
    return InstrCost(r * H * c.weight_bytes, T * H * 4 + T * r * 4, 2 * T * r * H)


SPEC = OpSpec("RMS_QKV_ROPE_APPEND", RmsQkvRopeAppend, execute, accesses, cost)
