"""The 2-D TMA tensor maps the kernel reads from device memory (encoded by the interpreter module's host code):
W_o's for the fused op's panel pages (csrc/interpreter/panel_pages.cuh) and TILE_MATMUL's for a stream with tiles
(csrc/interpreter/tile_streams.cuh)."""
from __future__ import annotations

from types import ModuleType

import torch

from engine.instructions.layout import ModelDims

W_O_MAP_BYTES = 128  # a CUtensorMap


def w_o_map(module: ModuleType, weights: dict[str, torch.Tensor], d: ModelDims) -> torch.Tensor | None:
    """W_o's panel map, or None where head_dim is not whole panels."""
    w_o = weights["w_o"]
    out = torch.empty(W_O_MAP_BYTES, dtype=torch.uint8, device=w_o.device)
    if module.encode_w_o_map(out.data_ptr(), w_o.data_ptr(), d.layers, d.hidden, d.n_heads, d.head_dim):
        return out
    return None


def tile_maps(module: ModuleType, weights: dict[str, torch.Tensor], acts: dict[str, torch.Tensor],
              d: ModelDims) -> torch.Tensor:
    """TILE_MATMUL's maps: the four layer matrices and the LM head, then this stream's tile inputs, all bf16: the
    normalised hidden, the attention output and act (`acts`: the stream's activation buffers)."""
    out = torch.empty(int(module.TILE_MAPS_BYTES), dtype=torch.uint8, device=weights["w_qkv"].device)
    buffers = {name: weights[name].data_ptr() for name in ("w_qkv", "w_o", "w_gate_up", "w_down", "lm_head")}
    buffers.update({name: acts[name].data_ptr() for name in ("x_bf16", "attn_bf16", "act_bf16")})
    module.encode_tile_maps(out.data_ptr(), buffers, d.layers, d.hidden, d.intermediate, d.qkv_rows, d.q_cols,
                            d.vocab, int(acts["hidden"].shape[0]))
    return out
