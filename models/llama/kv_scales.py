"""The scales of an fp8 KV cache (models/llama/kv_cache.py), one per layer and KV head, from the weights alone.

e4m3 keeps the same relative precision over [2^-6, 448] and loses it below (subnormals); a cache that stores k / 1
puts a small-valued model's keys and values partly down there (SmolLM2-135M: perplexity +5.1 % with fp8 weights and
KV). These scales instead map the largest value a head can take to 448, so nothing saturates and the typical values
sit far above the subnormals:

k_j = (W_k row j) . (gamma * x / rms(x)), and x / rms(x) has norm sqrt(H), so |k_j| <= ||W_k row j * gamma|| sqrt(H)
(Cauchy-Schwarz); RoPE rotates pairs of dims, which can move a pair's whole norm into one dim: a factor sqrt(2) more
for keys. Values have no rotation. A head's scale is the bound of its largest dim / 448. The typical value (about
||W_k row j * gamma||, for unit-variance inputs) then lands near 448 / sqrt(2 H) (5.6 for H = 4096), 2^9 or more
above e4m3's subnormals, so values down to ~1/500 of typical keep their three mantissa bits.

No calibration data, the same on every backend, fixed before any page is written. A checkpoint calibrated with
data (llm-compressor's kv_cache_scheme) brings its own scales, which are used instead.
"""
from __future__ import annotations

import math

import torch

from models.llama.fp8 import FP8_MAX
from models.llama.weights import LlamaWeights, Matrix, dense


def _head_bounds(w: Matrix, gamma: torch.Tensor, heads: int, factor: float) -> torch.Tensor:
    """The largest |value| each of `heads` heads of w's rows can take for a normalised input: [heads]."""
    per_dim = (dense(w, torch.float32).cpu() * gamma.float().cpu()[None, :]).norm(dim=1) * factor
    return per_dim.view(heads, -1).amax(dim=1)


def kv_scales(weights: LlamaWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """(k_scale, v_scale) float32 [num_layers, num_kv_heads] for an fp8 KV cache of `weights`: the checkpoint's own
    where it has them (models/llama/checkpoint_kv_scales.py), else derived (see the module docstring); a head whose
    rows are all zero gets scale 1."""
    if weights.kv_scales is not None:
        return weights.kv_scales[0].clone(), weights.kv_scales[1].clone()
    cfg = weights.config
    root_h = math.sqrt(cfg.hidden_size)
    k = torch.stack([_head_bounds(lw.k_proj, lw.input_layernorm, cfg.num_key_value_heads, root_h * math.sqrt(2))
                     for lw in weights.layers])
    v = torch.stack([_head_bounds(lw.v_proj, lw.input_layernorm, cfg.num_key_value_heads, root_h)
                     for lw in weights.layers])
    return tuple(torch.where(b > 0, b / FP8_MAX, torch.ones_like(b)).to(torch.float32) for b in (k, v))  # type: ignore[return-value]
