"""The megakernel's weight buffers from pack_weights' output where matrices are fp8 (engine/instructions/fp8_packing.py).

The kernel streams an fp8 matrix's e4m3 bytes as they are packed and multiplies each output by its row's scale
(csrc/interpreter/dot_fp8.cuh), so it takes one scale per packed row: per-tensor and per-channel matrices qualify,
128 x 128 block scales do not (refused here, naming the buffer; engine/quantization.py keeps such checkpoints off
the cuda backend's fp8 path before loading). The embedding is read one row per token, never streamed: it is given
to the kernel dequantised to bf16 (the values it stands for, rounded as any bf16 weight is).
"""
from __future__ import annotations

import torch

from engine.instructions.fp8_packing import COLS_SUFFIX, SCALE_SUFFIX, dequantized_rows
from engine.instructions.layout import ModelDims

# The streamed matrices the kernel reads as fp8 where they are packed so (Globals `<name>_scale`: globals.cuh).
STREAMED_MATRICES = ("w_qkv", "w_o", "w_gate_up", "w_down", "lm_head")
# An fp8 row (or K-slice of one) must be whole 16-byte vectors: a lane's load in dot_fp8.cuh, a bulk copy's unit.
FP8_ROW_ALIGN = 16


def is_fp8(packed: dict[str, torch.Tensor], name: str) -> bool:
    return name + SCALE_SUFFIX in packed


def kernel_weight_buffers(packed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The buffers the kernel takes by name: bf16 matrices as they are, fp8 ones as their bytes with `<name>_scale`
    float32 [..., rows], the embedding in bf16."""
    out = {k: v for k, v in packed.items() if not k.endswith((SCALE_SUFFIX, COLS_SUFFIX))}
    if is_fp8(packed, "embed"):
        out["embed"] = dequantized_rows(packed, "embed", (slice(None),)).to(torch.bfloat16).contiguous()
    for name in STREAMED_MATRICES:
        if not is_fp8(packed, name):
            continue
        scale = packed[name + SCALE_SUFFIX]
        if scale.shape[-1] != 1:
            cols = int(packed[name + COLS_SUFFIX])
            raise ValueError(f"{name}: fp8 scales per {cols}-column block; the megakernel applies one scale per "
                             "output row (per-tensor or per-channel fp8)")
        out[name + SCALE_SUFFIX] = scale[..., 0].to(torch.float32).contiguous()
    return out


def check_fp8_dims(packed: dict[str, torch.Tensor], d: ModelDims) -> None:
    """Refuse a model whose fp8 rows (or the down projection's K-slices) are not whole 16-byte vectors, naming the
    dimension."""
    if not any(is_fp8(packed, n) for n in STREAMED_MATRICES):
        return
    widths = {"hidden_size": d.hidden, "attention width (heads x head_dim)": d.q_cols,
              "intermediate_size tile (gate/up interleave)": d.gu_tile}
    for what, n in widths.items():
        if n % FP8_ROW_ALIGN:
            raise ValueError(f"fp8 weights on the megakernel need a {what} that is a multiple of {FP8_ROW_ALIGN}, "
                             f"got {n}")
