"""The fp8 matrices of the PyTorch baselines under `bench --quantization fp8`: torch._scaled_mm (cuBLASLt's e4m3
GEMM on Hopper) with a scale per output channel for the weights and one per token for the activations.

The weights are quantised as the megakernel's `--quantization fp8` does (models/llama/fp8.py quantize_fp8, channel
scales), so both read the same bytes. The activations are quantised to e4m3 on the fly, a scale per row (the
dynamic per-token scheme vLLM runs fp8 checkpoints with on Hopper): _scaled_mm multiplies e4m3 by e4m3, where the
megakernel multiplies e4m3 weights widened to f16 by f16 activations, so the two round differently.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from models.llama.fp8 import FP8_DTYPE, FP8_MAX, Fp8Scheme, quantize_fp8

# The smallest activation scale: a row of zeros quantises to zeros instead of dividing by zero.
MIN_ACTIVATION_SCALE = 1e-12


@dataclass(frozen=True)
class Fp8Linear:
    """W [out, in] as e4m3 `data` and float32 `scale` [1, out] (the row-wise layout _scaled_mm takes)."""

    data: torch.Tensor
    scale: torch.Tensor

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Fp8Linear:
        q = quantize_fp8(w, Fp8Scheme("channel"))
        return cls(q.data, q.scale.reshape(1, -1).contiguous())

    def num_bytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, in] -> x W^T [M, out] in x's dtype."""
        return fp8_matmul(x, self.data, self.scale)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 rows of x [M, K] and their float32 scales [M, 1] (each row's largest magnitude maps to 448)."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_ACTIVATION_SCALE)
    return (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


def fp8_matmul(x: torch.Tensor, data: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] (bf16 / f16 / f32) times the e4m3 matrix `data` [N, K] transposed, with `scale` [1, N]."""
    xq, xs = quantize_rows(x)
    out_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    # data.t() is column-major, the layout cuBLASLt's fp8 GEMM needs for its second operand.
    y = torch._scaled_mm(xq, data.t(), scale_a=xs, scale_b=scale, out_dtype=out_dtype)
    return y.to(x.dtype)
