"""The fp8 matrices of the PyTorch baselines under `bench --quantization fp8`: torch._scaled_mm (cuBLASLt's e4m3
GEMM on Hopper) with a scale per output channel for the weights and one per token for the activations.

The weights are quantised as the megakernel's `--quantization fp8` does (models/llama/fp8.py quantize_fp8, channel
scales: an Fp8Matrix), so both read the same bytes. The activations are quantised to e4m3 on the fly, a scale per
row (the dynamic per-token scheme vLLM runs fp8 checkpoints with on Hopper): _scaled_mm multiplies e4m3 by e4m3,
where the megakernel multiplies e4m3 weights widened to f16 by f16 activations, so the two round differently.
"""
from __future__ import annotations

import torch

from models.llama.fp8 import FP8_DTYPE, FP8_MAX

# The smallest activation scale: a row of zeros quantises to zeros instead of dividing by zero.
MIN_ACTIVATION_SCALE = 1e-12


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 rows of x [M, K] and their float32 scales [M, 1] (each row's largest magnitude maps to 448)."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_ACTIVATION_SCALE)
    return (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


def fp8_matmul(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] (bf16 / f16 / f32) times the e4m3 matrix `data` [N, K] transposed, with its channel scales [N]."""
    xq, xs = quantize_rows(x)
    out_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    # data.t() is column-major, the layout cuBLASLt's fp8 GEMM needs for its second operand.
    y = torch._scaled_mm(xq, data.t(), scale_a=xs, scale_b=scale.reshape(1, -1), out_dtype=out_dtype)
    return y.to(x.dtype)
