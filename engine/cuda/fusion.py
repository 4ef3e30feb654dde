"""When the cuda backend fuses batch-1 attention with its O-proj slice by default (SplitParams.fuse_o_proj),
and how: one query head per ATTN_O_PROJ instruction, its W_o slice copied as 2-D TMA panel pages
(csrc/interpreter/panel_pages.cuh) behind the group's earlier keys on the page ring.

Fusing saves a dependency hop per layer, but each instruction then streams its W_o slice (rows x head_dim)
while it waits for the layer's QKV: that slice has to fit the ring next to the rest of the chain's pages.
Measured on an H200 (same-run A/Bs): Llama-3.2-1B shape (one layer's W_o is 4 pages per SM) 0.815 ->
0.806-0.808 ms/token; Llama-3.1-8B shape (16 pages per SM, more than the ring) 4.169 -> 4.247. So the default
fuses where one layer's W_o spread over the SMs takes at most FUSED_MAX_W_O_PAGES_PER_SM ring pages, and where
memory is fast (engine/cuda/device_tuning.py decides which device is): on an H100 the 1B fused measured 0.982
against 0.978 ms/token split, on an H200 0.801 against 0.809.
"""
from __future__ import annotations

from engine.instructions.layout import ModelDims

FUSED_MAX_W_O_PAGES_PER_SM = 4
PANEL_COLS = 64  # csrc/interpreter/panel_pages.cuh: W_o columns per 128-byte panel


def fused_split_defaults(d: ModelDims, num_sms: int, page_bytes: int, w_o_panels: bool,
                         attn_kv_ring: bool, fast_memory: bool) -> dict[str, object]:
    """SplitParams defaults for the fused path: {fuse_o_proj, fused_head_chunks} where it pays, else
    {fuse_o_proj: False}. Needs the kernel's panel pages (one head of whole panels), KV-ring attention and a
    device whose memory is fast enough (device_tuning.DeviceTuning.fuse_small_w_o)."""
    w_o_bytes_per_sm = d.hidden * d.n_heads * d.head_dim * 2 / num_sms
    fits = w_o_bytes_per_sm <= FUSED_MAX_W_O_PAGES_PER_SM * page_bytes
    shape_ok = d.head_dim % PANEL_COLS == 0 and d.head_dim <= 4 * PANEL_COLS
    if fast_memory and w_o_panels and attn_kv_ring and shape_ok and fits:
        return {"fuse_o_proj": True, "fused_head_chunks": d.gqa}
    return {"fuse_o_proj": False}
