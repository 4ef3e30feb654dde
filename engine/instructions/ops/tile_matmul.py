"""TILE_MATMUL: one output tile of a layer's linear map for a chunk of the step's tokens, the GEMM form of the four
matvec opcodes for steps of many tokens (the cuda backend: csrc/interpreter/tile_matmul.cuh, on the tensor cores).

A tile is weight rows [row_begin, row_end) of one matrix times columns [k_begin, k_end) for tokens
[tok_begin, tok_end). Its kind says which matrix and what happens to the products:
- NORM (no matrix): RMSNorm(hidden) of its tokens, with the norm `block` names (NormOf), into x_bf16: the input of
  the QKV, GATE_UP and LM_HEAD tiles after it, normalised once per token instead of once per tile; the final norm's
  "tokens" are sequences: row s of x_bf16 is sequence s's last live token, the one the LM head reads;
- QKV: W_qkv rows of one KV group over the whole hidden width, x_bf16 as the input; RoPE, q rows into q, k/v rows
  into the paged cache (RMS_QKV_ROPE_APPEND's semantics for those tokens);
- O: W_o over a K-slice of attn_bf16 (the attention output, which the attention ops write next to attn_out), added
  into hidden (the residual);
- GATE_UP: interleaved W_gate_up rows (whole gate/up tile pairs) over the whole hidden width, x_bf16 as the input;
  silu(gate) * up into act_bf16;
- DOWN: W_down over a K-slice of act_bf16, added into hidden;
- LM_HEAD: LM head rows (vocabulary ids) over the whole hidden width for sequences [tok_begin, tok_end), x_bf16
  (the final norm's: row s is sequence s's last token) as the input; logits, and the block's (max, first argmax) per
  sequence into lm_max / lm_arg[:, block] (LM_HEAD's semantics for those sequences).
A layer of tiles keeps the residual in hidden throughout (no mid): O and DOWN add into it, which is why the MLP's
NORM tiles wait for all the layer's O tiles and the next layer's for all its DOWN tiles. The bf16 inputs are what
the tensor cores read (csrc/interpreter/tile_matmul.cuh): each is written once, by one instruction per token
range, so a tile's K steps arrive as copies it multiplies directly. (The VM keeps them in fp32, as every activation.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.instructions.accesses import Access, box, runs
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
    NORM = 5


class NormOf(IntEnum):
    """Which RMSNorm a NORM tile applies (its `block` operand)."""

    ATTN = 0
    MLP = 1
    FINAL = 2


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
    block: int = 0  # LM_HEAD: its column of lm_max / lm_arg; NORM: which norm (NormOf)
    header: Header = field(default_factory=Header)


def kv_group_of(i: TileMatmul, b: Buffers) -> int:
    """The KV group a QKV tile's rows belong to (a tile never spans two: the builder cuts within groups)."""
    d = b.dims
    return i.row_begin // ((d.n_heads // d.n_kv + 2) * d.head_dim)


def _norm_weight(i: TileMatmul, b: Buffers) -> torch.Tensor:
    if i.block == NormOf.FINAL:
        return b.w("final_norm")
    return b.w("attn_norm" if i.block == NormOf.ATTN else "mlp_norm")[i.header.layer]


def final_norm_rows(i: TileMatmul, b: Buffers) -> torch.Tensor:
    """The hidden rows a final-norm tile reads: the last live token of each of its sequences [tok_begin, tok_end)."""
    return torch.tensor(b.args.last_live_tokens(i.tok_begin, i.tok_end), dtype=torch.int64)


def dead(i: TileMatmul, b: Buffers) -> bool:
    """A tile of a padded step's dead tokens only (past the last sequence's StepArgsView.live_end): it does nothing.
    The LM head's and the final norm's tiles, over sequences, always run."""
    if i.kind == TileKind.LM_HEAD or (i.kind == TileKind.NORM and i.block == NormOf.FINAL):
        return False
    return i.tok_begin >= b.args.live_end(b.args.num_seqs - 1)


def execute(i: TileMatmul, b: Buffers) -> None:
    if dead(i, b):
        return
    layer, t = i.header.layer, slice(i.tok_begin, i.tok_end)
    rows, k = slice(i.row_begin, i.row_end), slice(i.k_begin, i.k_end)
    if i.kind == TileKind.NORM:
        rows = final_norm_rows(i, b) if i.block == NormOf.FINAL else t
        b.get("x_bf16")[t] = rms(b.get("hidden")[rows], _norm_weight(i, b), b.dims.eps)
    elif i.kind == TileKind.QKV:
        write_qkv_rows(b, layer, i.row_begin, i.row_end, kv_group_of(i, b), i.tok_begin, i.tok_end, source="x_bf16")
    elif i.kind == TileKind.LM_HEAD:
        logits = b.get("x_bf16")[t].to(torch.float32) @ b.matrix("lm_head", rows).T
        b.get("logits")[t, rows] = logits
        mx, arg = logits.max(dim=1)  # the first maximal index
        b.get("lm_max")[t, i.block] = mx
        b.get("lm_arg")[t, i.block] = (arg + i.row_begin).to(torch.int32)
    elif i.kind == TileKind.GATE_UP:
        x = b.get("x_bf16")[t].to(torch.float32)
        y = (x @ b.matrix("w_gate_up", layer, rows).T).view(x.shape[0], -1, 2, b.dims.gu_tile)
        act = (F.silu(y[:, :, 0]) * y[:, :, 1]).reshape(x.shape[0], -1)
        b.get("act_bf16")[t, i.row_begin // 2: i.row_end // 2] = act
    else:
        src, matrix = ("attn_bf16", "w_o") if i.kind == TileKind.O else ("act_bf16", "w_down")
        y = b.get(src)[t, k].to(torch.float32) @ b.matrix(matrix, layer, rows, k).T
        b.accumulate("hidden", i.header.instr_id, (t, rows), y)


def accesses(i: TileMatmul, b: Buffers) -> list[Access]:
    if dead(i, b):
        return []
    t, d = (i.tok_begin, i.tok_end), b.dims
    if i.kind == TileKind.NORM:
        read = runs(final_norm_rows(i, b).numpy()) if i.block == NormOf.FINAL else t
        return [Access("hidden", "r", (box(read, (0, d.hidden)),)), Access("x_bf16", "w", (box(t, (0, d.hidden)),))]
    if i.kind == TileKind.QKV:
        return qkv_rows_accesses(b, i.header.layer, i.row_begin, i.row_end, kv_group_of(i, b), *t, source="x_bf16")
    if i.kind == TileKind.LM_HEAD:
        return [Access("x_bf16", "r", (box(t, (0, d.hidden)),)),
                Access("logits", "w", (box(t, (i.row_begin, i.row_end)),)),
                Access("lm_part", "w", (box(t, (i.block, i.block + 1)),))]
    if i.kind == TileKind.GATE_UP:
        return [Access("x_bf16", "r", (box(t, (0, d.hidden)),)),
                Access("act_bf16", "w", (box(t, (i.row_begin // 2, i.row_end // 2)),))]
    src = "attn_bf16" if i.kind == TileKind.O else "act_bf16"
    return [Access(src, "r", (box(t, (i.k_begin, i.k_end)),)),
            Access("hidden", "acc", (box(t, (i.row_begin, i.row_end)),))]


def cost(i: TileMatmul, c: CostInputs) -> InstrCost:
    n, r, k = i.tok_end - i.tok_begin, i.row_end - i.row_begin, i.k_end - i.k_begin
    if i.kind == TileKind.NORM:
        return InstrCost(0, n * c.dims.hidden * (4 + 2), 4 * n * c.dims.hidden)
    out_bytes = n * r * (2 if i.kind in (TileKind.QKV, TileKind.GATE_UP) else 4)
    return InstrCost(r * k * c.weight_bytes, n * k * 2 + out_bytes, 2 * n * r * k)


SPEC = OpSpec("TILE_MATMUL", TileMatmul, execute, accesses, cost, kinds=("kind", {k.value: k.name for k in TileKind}))
