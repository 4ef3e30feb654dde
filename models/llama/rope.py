"""Rotary position embeddings, numerically identical to Hugging Face's Llama.

Frequencies and cos/sin are computed in float32 (as HF does, whatever the model dtype), then cast to
the activation dtype right before the rotation. The rotation uses the rotate_half convention: the
two halves of head_dim form the (real, imaginary) pairs, not interleaved neighbours.
"""
from __future__ import annotations

import math

import torch

from models.llama.config import LlamaConfig


def inv_freq(config: LlamaConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """float32 [head_dim // 2] inverse frequencies, with the config's llama3/linear scaling applied."""
    dim = config.head_dim
    base = config.rope_theta
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return freqs
    if scaling.rope_type == "linear":
        return freqs / scaling.factor
    # llama3: keep high frequencies, divide low frequencies by `factor`, blend smoothly in between.
    old_ctx = scaling.original_max_position_embeddings
    low_freq_wavelen = old_ctx / scaling.low_freq_factor
    high_freq_wavelen = old_ctx / scaling.high_freq_factor
    wavelen = 2 * math.pi / freqs
    scaled = torch.where(wavelen > low_freq_wavelen, freqs / scaling.factor, freqs)
    smooth = (old_ctx / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cos_sin(config: LlamaConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (cos, sin), each [T, head_dim], for integer positions [T]."""
    freqs = positions.to(torch.float32)[:, None] * inv_freq(config, positions.device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [T, heads, head_dim] by cos/sin [T, head_dim]; computed in x's dtype like HF."""
    c = cos.to(x.dtype)[:, None, :]
    s = sin.to(x.dtype)[:, None, :]
    return x * c + rotate_half(x) * s
