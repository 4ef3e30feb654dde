"""The RMSNorm of the reference semantics (the opcodes that normalise their input share it)."""
from __future__ import annotations

import torch


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 RMSNorm per row (HF LlamaRMSNorm order: normalise, then scale)."""
    return w.to(torch.float32) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
