"""Pack HF-layout LlamaWeights into the interpreter's weight buffers (once per model).

- w_qkv [L, n_kv*(G+2)*hd, H]: per KV group g the rows of its G q heads, then k head g, then v head g,
  so one group's rows are contiguous and a QKV row block belongs to exactly one group. Inside each q
  and k head the rows are permuted by `rope_perm` so the rotate_half partners (i, i+hd/2) sit at
  (2i, 2i+1): RoPE is then a pairwise rotation inside any even-aligned row block.
- w_gate_up [L, 2I, H]: tiles of `gu_tile` gate rows followed by the same `gu_tile` up rows.
- w_o, w_down, norms, embed, lm_head: HF layout, stacked over layers; lm_head aliases embed when tied.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.instructions.layout import ModelDims, qkv_row_map
from models.llama.rope import inv_freq
from models.llama.weights import LlamaWeights


def qkv_source_rows(d: ModelDims) -> np.ndarray:
    """src[r] = row of cat(q_proj, k_proj, v_proj) stored at packed W_qkv row r."""
    kind, head, dim = qkv_row_map(d)
    base = np.where(kind == 0, 0, np.where(kind == 1, d.q_cols, d.q_cols + d.n_kv * d.head_dim))
    return base + head * d.head_dim + dim


def gate_up_source_rows(d: ModelDims) -> np.ndarray:
    """src[r] = row of cat(gate_proj, up_proj) stored at packed W_gate_up row r."""
    t, inter = d.gu_tile, d.intermediate
    r = np.arange(2 * inter)
    tile, off = r // (2 * t), r % (2 * t)
    return np.where(off < t, tile * t + off, inter + tile * t + (off - t))


def pack_weights(weights: LlamaWeights, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Every buffer of `layout.weight_specs`, contiguous, in `dtype` (rope_inv_freq stays float32)."""
    cfg = weights.config
    d = ModelDims.from_config(cfg)
    qsrc = torch.from_numpy(qkv_source_rows(d))
    gsrc = torch.from_numpy(gate_up_source_rows(d))
    cast = lambda t: t.to(dtype).contiguous()  # noqa: E731
    layers = weights.layers
    embed = cast(weights.embed_tokens)
    tied = weights.lm_head is weights.embed_tokens
    return {
        "embed": embed,
        "attn_norm": cast(torch.stack([lw.input_layernorm for lw in layers])),
        "w_qkv": cast(torch.stack([torch.cat([lw.q_proj, lw.k_proj, lw.v_proj])[qsrc] for lw in layers])),
        "w_o": cast(torch.stack([lw.o_proj for lw in layers])),
        "mlp_norm": cast(torch.stack([lw.post_attention_layernorm for lw in layers])),
        "w_gate_up": cast(torch.stack([torch.cat([lw.gate_proj, lw.up_proj])[gsrc] for lw in layers])),
        "w_down": cast(torch.stack([lw.down_proj for lw in layers])),
        "final_norm": cast(weights.norm),
        "lm_head": embed if tied else cast(weights.lm_head),
        "rope_inv_freq": inv_freq(cfg).to(torch.float32).contiguous(),
    }
