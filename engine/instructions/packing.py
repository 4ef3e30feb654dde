"""Pack HF-layout LlamaWeights into the interpreter's weight buffers (once per model).

- w_qkv [L, n_kv*(G+2)*hd, H]: per KV group g the rows of its G q heads, then k head g, then v head g,
  so one group's rows are contiguous and a QKV row block belongs to exactly one group. Inside each q
  and k head the rows are permuted by `rope_perm` so the rotate_half partners (i, i+hd/2) sit at
  (2i, 2i+1): RoPE is then a pairwise rotation inside any even-aligned row block.
- w_gate_up [L, 2I, H]: tiles of `gu_tile` gate rows followed by the same `gu_tile` up rows.
- w_o, w_down, norms, embed, lm_head: HF layout, stacked over layers; lm_head aliases embed when tied.
- A head dim the kernel does not run is stored zero-padded (head_padding.py): hd above is the stored width,
  the padded rows of w_qkv and columns of w_o are zero, rope_inv_freq is zero past the checkpoint's pairs.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.instructions.fp8_packing import pack_fp8
from engine.instructions.head_padding import model_dims_of_stored, stored_source_index
from engine.instructions.layout import ModelDims, qkv_row_map
from models.llama.rope import inv_freq
from models.llama.weights import LlamaWeights


def qkv_source_rows(d: ModelDims) -> np.ndarray:
    """src[r] = row of cat(q_proj, k_proj, v_proj) stored at packed W_qkv row r; -1: a padded dim (zero row)."""
    kind, head, dim = qkv_row_map(d)
    mhd = d.model_head_dim
    base = np.where(kind == 0, 0, np.where(kind == 1, d.n_heads * mhd, (d.n_heads + d.n_kv) * mhd))
    model_dim = model_dims_of_stored(d.head_dim, mhd)[dim]
    return np.where(model_dim < 0, -1, base + head * mhd + model_dim)


def o_source_cols(d: ModelDims) -> np.ndarray:
    """src[c] = column of o_proj stored at W_o column c; -1: a padded dim (zero column)."""
    return stored_source_index(d.n_heads, d.head_dim, d.model_head_dim)


def take_padded(t: torch.Tensor, src: np.ndarray, dim: int) -> torch.Tensor:
    """t's rows (dim 0) or columns (dim 1) at `src`, zeros where src is -1 (t itself where src is every index in
    order: no copy of W_o for an unpadded head dim)."""
    if np.array_equal(src, np.arange(t.shape[dim])):
        return t
    zero = torch.zeros_like(t.narrow(dim, 0, 1))
    index = torch.from_numpy(np.where(src < 0, t.shape[dim], src)).to(t.device)
    return torch.cat([t, zero], dim=dim).index_select(dim, index)


def gate_up_source_rows(d: ModelDims) -> np.ndarray:
    """src[r] = row of cat(gate_proj, up_proj) stored at packed W_gate_up row r."""
    t, inter = d.gu_tile, d.intermediate
    r = np.arange(2 * inter)
    tile, off = r // (2 * t), r % (2 * t)
    return np.where(off < t, tile * t + off, inter + tile * t + (off - t))


def pack_weights(weights: LlamaWeights, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Every buffer of `layout.weight_specs`, contiguous, in `dtype` (rope_inv_freq stays float32); an fp8 matrix's
    buffer holds its e4m3 bytes, with its scales beside it (fp8_packing.py)."""
    cfg = weights.config
    d = ModelDims.from_config(cfg)
    qsrc, osrc = qkv_source_rows(d), o_source_cols(d)
    gsrc = torch.from_numpy(gate_up_source_rows(d))
    cast = lambda t: t.to(dtype).contiguous()  # noqa: E731
    layers = weights.layers
    tied = weights.lm_head is weights.embed_tokens
    freq = torch.zeros(d.head_dim // 2, dtype=torch.float32)
    freq[:d.model_head_dim // 2] = inv_freq(cfg).to(torch.float32)
    packed: dict[str, torch.Tensor] = {}
    packed.update(pack_fp8("embed", [[weights.embed_tokens]], lambda m: m[0], dtype, stacked=False))
    packed["attn_norm"] = cast(torch.stack([lw.input_layernorm for lw in layers]))
    packed.update(pack_fp8("w_qkv", [[lw.q_proj, lw.k_proj, lw.v_proj] for lw in layers],
                           lambda m: take_padded(torch.cat(list(m)), qsrc, 0), dtype))
    packed.update(pack_fp8("w_o", [[lw.o_proj] for lw in layers], lambda m: take_padded(m[0], osrc, 1), dtype))
    packed["mlp_norm"] = cast(torch.stack([lw.post_attention_layernorm for lw in layers]))
    packed.update(pack_fp8("w_gate_up", [[lw.gate_proj, lw.up_proj] for lw in layers],
                           lambda m: torch.cat(list(m))[gsrc], dtype))
    packed.update(pack_fp8("w_down", [[lw.down_proj] for lw in layers], lambda m: m[0], dtype))
    packed["final_norm"] = cast(weights.norm)
    if tied:
        packed.update({k.replace("embed", "lm_head", 1): v for k, v in packed.items() if k.startswith("embed")})
    else:
        packed.update(pack_fp8("lm_head", [[weights.lm_head]], lambda m: m[0], dtype, stacked=False))
    packed["rope_inv_freq"] = freq
    return packed
