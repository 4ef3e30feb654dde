"""TILE_MATMUL: one output tile of a layer's linear map for a chunk of the step's tokens, the GEMM form of the four
matvec opcodes for steps of many tokens (the cuda backend: csrc/interpreter/tile_matmul.cuh, on the tensor cores).

A tile is weight rows [row_begin, row_end) of one matrix times columns [k_begin, k_end) for tokens
[tok_begin, tok_end). Its kind says which matrix and what happens to the products:
- QKV: W_qkv rows of one KV group over the whole hidden width, RMSNorm(hidden) as the input; RoPE, q rows into q,
  k/v rows into the paged cache (RMS_QKV_ROPE_APPEND's semantics for those tokens);
- O: W_o over a K-slice of the attention output, added into hidden (the residual);
- GATE_UP: interleaved W_gate_up rows (whole gate/up tile pairs) over the whole hidden width, RMSNorm(hidden)
  as the input; silu(gate) * up into act;
- DOWN: W_down over a K-slice of act, added into hidden;
- LM_HEAD: LM head rows (vocabulary ids) over the whole hidden width for a step whose every sequence has one token
  (token t is sequence t), RMSNorm(hidden) with the final norm as the input; logits, and the block's (max, first
  argmax) per sequence into lm_max / lm_arg[:, block] (LM_HEAD's semantics for those sequences).
A layer of tiles keeps the residual in hidden throughout (no mid): O and DOWN add into it, which is why every
GATE_UP tile waits for all the layer's O tiles and every DOWN tile for all its GATE_UP tiles (they read hidden).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec
from engine.instructions.ops.rms_qkv_rope_append import qkv_rows_accesses, write_qkv_rows
from engine.instructions.rmsnorm import rms


class TileKind(IntEnum):
    QKV = 0
    O = 1
    GATE_UP = 2
    DOWN = 3
    LM_HEAD = 4


@dataclass(frozen=True)
class TileMatmul:
    """Rows [row_begin, row_end) x columns [k_begin, k_end) of the kind's matrix for tokens [tok_begin, tok_end)."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("kind", "row_begin", "row_end", "k_begin", "k_end", "tok_begin",
                                           "tok_end", "block")
    kind: int
    row_begin: int
    row_end: int
    k_begin: int
    k_end: int
    tok_begin: int
    tok_end: int
    block: int = 0  # LM_HEAD: its column of lm_max / lm_arg
    header: Header = field(default_factory=Header)


def kv_group_of(i: TileMatmul, b: Buffers) -> int:
    """The KV group a QKV tile's rows belong to (a tile never spans two: the builder cuts within groups)."""
    d = b.dims
    return i.row_begin // ((d.n_heads // d.n_kv + 2) * d.head_dim)


def execute(i: TileMatmul, b: Buffers) -> None:
    layer, t = i.header.layer, slice(i.tok_begin, i.tok_end)
    rows, k = slice(i.row_begin, i.row_end), slice(i.k_begin, i.k_end)
    if i.kind == TileKind.QKV:
        write_qkv_rows(b, layer, i.row_begin, i.row_end, kv_group_of(i, b), i.tok_begin, i.tok_end)
    elif i.kind == TileKind.LM_HEAD:
        x = rms(b.get("hidden")[t], b.w("final_norm"), b.dims.eps)
        logits = x @ b.matrix("lm_head", rows).T
        b.get("logits")[t, rows] = logits
        mx, arg = logits.max(dim=1)  # the first maximal index
        b.get("lm_max")[t, i.block] = mx
        b.get("lm_arg")[t, i.block] = (arg + i.row_begin).to(torch.int32)
    elif i.kind == TileKind.GATE_UP:
        d = b.dims
        x = rms(b.get("hidden")[t], b.w("mlp_norm")[layer], d.eps)
        y = (x @ b.matrix("w_gate_up", layer, rows).T).view(x.shape[0], -1, 2, d.gu_tile)
        b.get("act")[t, i.row_begin // 2: i.row_end // 2] = (F.silu(y[:, :, 0]) * y[:, :, 1]).reshape(x.shape[0], -1)
    else:
        src, matrix = ("attn_out", "w_o") if i.kind == TileKind.O else ("act", "w_down")
        y = b.get(src)[t, k] @ b.matrix(matrix, layer, rows, k).T
        b.accumulate("hidden", i.header.instr_id, (t, rows), y)


def accesses(i: TileMatmul, b: Buffers) -> list[Access]:
    t, d = (i.tok_begin, i.tok_end), b.dims
    if i.kind == TileKind.QKV:
        return qkv_rows_accesses(b, i.header.layer, i.row_begin, i.row_end, kv_group_of(i, b), *t)
    if i.kind == TileKind.LM_HEAD:
        return [Access("hidden", "r", (box(t, (0, d.hidden)),)),
                Access("logits", "w", (box(t, (i.row_begin, i.row_end)),)),
                Access("lm_part", "w", (box(t, (i.block, i.block + 1)),))]
    if i.kind == TileKind.GATE_UP:
        return [Access("hidden", "r", (box(t, (0, d.hidden)),)),
                Access("act", "w", (box(t, (i.row_begin // 2, i.row_end // 2)),))]
    src = "attn_out" if i.kind == TileKind.O else "act"
    return [Access(src, "r", (box(t, (i.k_begin, i.k_end)),)),
            Access("hidden", "acc", (box(t, (i.row_begin, i.row_end)),))]


def cost(i: TileMatmul, c: CostInputs) -> InstrCost:
    n, r, k = i.tok_end - i.tok_begin, i.row_end - i.row_begin, i.k_end - i.k_begin
    out_bytes = n * r * (2 if i.kind == TileKind.QKV else 4)
    return InstrCost(r * k * c.weight_bytes, n * k * 4 + out_bytes, 2 * n * r * k)


SPEC = OpSpec("TILE_MATMUL", TileMatmul, execute, accesses, cost, kinds=("kind", {k.value: k.name for k in TileKind}))
