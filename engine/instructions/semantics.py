"""Reference semantics: one PyTorch function per opcode, reading/writing the global buffers exactly as
the CUDA interpreter does (fp32 math; weights and KV may be bf16 and are upcast on load).

`execute(instr, bufs)` dispatches on the opcode. `bufs` is an `engine.vm.buffers.GlobalBuffers`.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from engine.instructions import opcodes as op
from engine.instructions.semantics_attention import attn_o_proj, attn_partial, attn_reduce


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 RMSNorm per row (HF LlamaRMSNorm order: normalise, then scale)."""
    return w.to(torch.float32) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def embed(i: op.Embed, b) -> None:  # noqa: ANN001 (GlobalBuffers; avoids an import cycle)
    ids = b.args.token_ids[i.tok_begin: i.tok_end]
    b.get("hidden")[i.tok_begin: i.tok_end] = b.w("embed")[ids].to(torch.float32)


def qkv(i: op.RmsQkvRopeAppend, b) -> None:  # noqa: ANN001
    d, a, layer = b.dims, b.args, i.header.layer
    T = a.num_tokens
    x = rms(b.get("hidden")[:T], b.w("attn_norm")[layer], d.eps)
    y = x @ b.w("w_qkv")[layer, i.row_begin: i.row_end].to(torch.float32).T  # [T, rows]
    kind = b.rows.kind[i.row_begin: i.row_end]
    head = b.rows.head[i.row_begin: i.row_end]
    dim = b.rows.dim[i.row_begin: i.row_end]
    rot = torch.from_numpy(kind < 2)
    if bool(rot.any()):
        # Packed rows come in adjacent rotate_half pairs (2i, 2i+1) = original dims (i, i + hd/2).
        pair = torch.arange(i.row_begin, i.row_end) % d.head_dim // 2
        ang = a.positions.to(torch.float32)[:, None] * b.w("rope_inv_freq")[pair][None, :]
        c, s = torch.cos(ang), torch.sin(ang)
        x0, x1 = y[:, 0::2], y[:, 1::2]
        c0, s0 = c[:, 0::2], s[:, 0::2]
        rotated = torch.stack((x0 * c0 - x1 * s0, x1 * c0 + x0 * s0), dim=-1).reshape(y.shape)
        y = torch.where(rot[None, :], rotated, y)
    kind_t, head_t, dim_t = (torch.from_numpy(v) for v in (kind, head, dim))
    qm = kind_t == 0
    if bool(qm.any()):
        b.get("q")[:T, head_t[qm] * d.head_dim + dim_t[qm]] = y[:, qm]
    slots = a.slot_mapping
    pages, rows = slots // a.page_size, slots % a.page_size
    for k, cache in ((1, b.k_cache), (2, b.v_cache)):
        m = kind_t == k
        if bool(m.any()):
            dims = dim_t[m]
            cache[layer, pages[:, None], i.kv_group, rows[:, None], dims[None, :]] = y[:, m].to(cache.dtype)
    if i.copy_end > i.copy_begin:  # fused O-proj: mid starts as the layer input (see ATTN_O_PROJ)
        copy = slice(i.copy_begin, i.copy_end)
        b.get("mid")[:T, copy] = b.get("hidden")[:T, copy]


def o_proj(i: op.OProjResidual, b) -> None:  # noqa: ANN001
    T, layer, r = b.args.num_tokens, i.header.layer, slice(i.row_begin, i.row_end)
    y = b.get("attn_out")[:T] @ b.w("w_o")[layer, r].to(torch.float32).T
    hidden = b.get("hidden")
    mid = b.get("mid")
    mid[:T, r] = hidden[:T, r] + y
    hidden[:T, r] = mid[:T, r]


def gate_up(i: op.RmsGateUpSilu, b) -> None:  # noqa: ANN001
    d, T, layer = b.dims, b.args.num_tokens, i.header.layer
    x = rms(b.get("mid")[:T], b.w("mlp_norm")[layer], d.eps)
    y = x @ b.w("w_gate_up")[layer, 2 * i.i_begin: 2 * i.i_end].to(torch.float32).T
    y = y.view(T, -1, 2, d.gu_tile)
    b.get("act")[:T, i.i_begin: i.i_end] = (F.silu(y[:, :, 0]) * y[:, :, 1]).reshape(T, -1)


def down(i: op.DownResidual, b) -> None:  # noqa: ANN001
    T, layer = b.args.num_tokens, i.header.layer
    k = slice(i.k_begin, i.k_end)
    y = b.get("act")[:T, k] @ b.w("w_down")[layer, i.row_begin: i.row_end, k].to(torch.float32).T
    b.accumulate("hidden", i.header.instr_id, (slice(0, T), slice(i.row_begin, i.row_end)), y)


def lm_head(i: op.LmHead, b) -> None:  # noqa: ANN001
    a = b.args
    last = torch.tensor(a.query_start[1:]) - 1
    x = rms(b.get("hidden")[last], b.w("final_norm"), b.dims.eps)
    logits = x @ b.w("lm_head")[i.v_begin: i.v_end].to(torch.float32).T  # [S, block]
    b.get("logits")[:, i.v_begin: i.v_end] = logits
    mx, arg = logits.max(dim=1)  # torch returns the first maximal index
    b.get("lm_max")[:, i.block] = mx
    b.get("lm_arg")[:, i.block] = (arg + i.v_begin).to(torch.int32)


def argmax_reduce(i: op.ArgmaxReduce, b) -> None:  # noqa: ANN001
    mx = b.get("lm_max")[:, : i.num_blocks]
    arg = b.get("lm_arg")[:, : i.num_blocks]
    best = mx.argmax(dim=1)  # first block attaining the max = smallest vocab id (blocks are in vocab order)
    b.get("out_tokens")[:] = arg.gather(1, best[:, None])[:, 0]


_DISPATCH: dict[type, Callable] = {
    op.Embed: embed, op.RmsQkvRopeAppend: qkv, op.AttnPartial: attn_partial, op.AttnReduce: attn_reduce,
    op.OProjResidual: o_proj, op.RmsGateUpSilu: gate_up, op.DownResidual: down, op.LmHead: lm_head,
    op.ArgmaxReduce: argmax_reduce, op.AttnOProj: attn_o_proj, op.Noop: lambda i, b: None,
}


def execute(instr: op.Instruction, bufs) -> None:  # noqa: ANN001
    _DISPATCH[type(instr)](instr, bufs)
