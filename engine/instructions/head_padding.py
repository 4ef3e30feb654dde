"""The head dims the megakernel's attention runs, and the zero padding that stores any other head dim in one.

Why: the kernel's attention gives each of a warp's 32 lanes DPL dims of a head (DPL 1, 2, 4 or 8:
csrc/interpreter/attention_math.cuh), so it runs head dims 32, 64, 128 and 256, and its RoPE epilogue finds a
row's head and pair with shifts (a power of two). A checkpoint whose head dim is none of those (80, 96, 100: several
small Llama-architecture models) is stored in the next one up, P: its q, k and v rows and its W_o columns placed
in a P-wide head whose other dims are zero. Zero q and k dims add nothing to a score and zero v dims give zero
outputs, which meet zero W_o columns: attention is unchanged, at the price of the padded dims' bytes (K/V cache,
W_qkv rows, W_o columns).
RoPE keeps Hugging Face's rotate_half pairs (i, i + hd/2): the checkpoint's dims [0, hd/2) and [hd/2, hd) sit at
[0, hd/2) and [P/2, P/2 + hd/2) of the stored head, whose pairs are (i, i + P/2), with the checkpoint's frequencies
for i < hd/2 and zero beyond (zero dims stay zero). The softmax scale stays 1/sqrt(hd) (ModelDims.model_head_dim).
Every backend that runs instruction streams (vm, cuda) stores heads this way, so both run the same tensors.
"""
from __future__ import annotations

import numpy as np

# Head dims the kernel's attention runs: 32 lanes x 1, 2, 4 or 8 dims (attention_math.cuh, attention_pass.cuh).
LANE_HEAD_DIMS = (32, 64, 128, 256)


def stored_head_dim(head_dim: int) -> int:
    """The head dim a checkpoint's heads are stored in: the smallest of LANE_HEAD_DIMS that holds `head_dim`
    (a larger one is kept as it is; the cuda backend refuses it: engine/cuda/limits.py)."""
    return next((p for p in LANE_HEAD_DIMS if p >= head_dim), head_dim)


def model_dims_of_stored(stored: int, head_dim: int) -> np.ndarray:
    """m[p] = the checkpoint's dim stored at dim p of a `stored`-wide head, -1 where p is padding."""
    if head_dim % 2 or stored % 2 or head_dim > stored:
        raise ValueError(f"model_dims_of_stored: head_dim {head_dim} must be even and fit the stored {stored}")
    p, half, stored_half = np.arange(stored), head_dim // 2, stored // 2
    upper = (p >= stored_half) & (p < stored_half + half)
    return np.where(p < half, p, np.where(upper, p - stored_half + half, -1))


def stored_source_index(heads: int, stored: int, head_dim: int) -> np.ndarray:
    """src[c] = the checkpoint's row (of q/k/v_proj) or column (of o_proj) stored at c of `heads` stored heads
    ([heads * stored]), -1 where c is padding."""
    m = model_dims_of_stored(stored, head_dim)
    h = np.repeat(np.arange(heads), stored)
    mm = np.tile(m, heads)
    return np.where(mm < 0, -1, h * head_dim + mm)
