"""FP8 (e4m3) weight matrices with their scales: the layouts, quantisation and dequantisation.

A quantised matrix W [out, in] is stored as `data` (float8_e4m3fn, the same shape) and float32 `scale`s; the
value it stands for is data * scale, with the scale broadcast by its granularity:
- "tensor":  scale [] (one for the whole matrix);
- "channel": scale [out] (one per output row: the matvec applies it once per row, after the dot product);
- "block":   scale [ceil(out / rows), ceil(in / cols)] (one per `block` = (rows, cols) tile, 128 x 128 by default;
             DeepSeek-style `weight_block_size` checkpoints).
Quantising maps each group's largest magnitude to e4m3's largest finite value (448), so nothing saturates; a group
of zeros gets scale 1. These are the semantics every backend computes: the torch reference dequantises and
multiplies, the megakernel would apply the scales in its epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
GRANULARITIES = ("tensor", "channel", "block")
DEFAULT_BLOCK = (128, 128)


@dataclass(frozen=True)
class Fp8Scheme:
    """How to quantise a bf16 checkpoint on load: per output channel (the default, as vLLM's dynamic fp8) or per
    (rows, cols) block."""

    granularity: str = "channel"
    block: tuple[int, int] = DEFAULT_BLOCK

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"fp8 granularity must be one of {', '.join(GRANULARITIES)}, got {self.granularity!r}")
        if len(self.block) != 2 or min(self.block) < 1:
            raise ValueError(f"fp8 block must be two positive sizes, got {self.block!r}")


@dataclass(frozen=True)
class Fp8Matrix:
    """An e4m3 matrix and its scales (see the module's docstring for the layouts)."""

    data: torch.Tensor  # float8_e4m3fn [out, in]
    scale: torch.Tensor  # float32: [], [out] or [ceil(out / block[0]), ceil(in / block[1])]
    granularity: str
    block: tuple[int, int] = DEFAULT_BLOCK

    def __post_init__(self) -> None:
        if self.data.dtype != FP8_DTYPE or self.data.dim() != 2:
            raise ValueError(f"fp8 data must be a 2-D {FP8_DTYPE} tensor, got {self.data.dtype} "
                             f"{list(self.data.shape)}")
        want = scale_shape(tuple(self.data.shape), self.granularity, self.block)
        if tuple(self.scale.shape) != want:
            raise ValueError(f"fp8 {self.granularity} scale of a {list(self.data.shape)} matrix must have shape "
                             f"{list(want)}, got {list(self.scale.shape)}")

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @property
    def device(self) -> torch.device:
        return self.data.device

    def num_bytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()

    def to(self, device: torch.device | str) -> Fp8Matrix:
        return Fp8Matrix(self.data.to(device), self.scale.to(device), self.granularity, self.block)

    def row_scales(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The scale of every element, float32 [len(rows) or out, in] (rows: a subset of the rows)."""
        out, cols = self.data.shape
        n = out if rows is None else rows.numel()
        scale = self.scale.float()
        if self.granularity == "tensor":
            return scale.expand(n, cols)
        if self.granularity == "channel":
            return (scale if rows is None else scale[rows])[:, None].expand(n, cols)
        br, bc = self.block
        per_row = scale.repeat_interleave(br, dim=0)[:out] if rows is None else scale[rows // br]
        return per_row.repeat_interleave(bc, dim=1)[:, :cols]

    def dequantize(self, dtype: torch.dtype = torch.float32, rows: torch.Tensor | None = None) -> torch.Tensor:
        """data * scale in float32, then cast to `dtype`; `rows`: only those rows (an embedding lookup)."""
        data = self.data if rows is None else self.data[rows]
        return (data.float() * self.row_scales(rows)).to(dtype)


def scale_shape(shape: tuple[int, ...], granularity: str, block: tuple[int, int] = DEFAULT_BLOCK) -> tuple[int, ...]:
    out, cols = shape
    if granularity == "tensor":
        return ()
    if granularity == "channel":
        return (out,)
    if granularity == "block":
        return (-(-out // block[0]), -(-cols // block[1]))
    raise ValueError(f"fp8 granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")


def _scales_from_amax(amax: torch.Tensor) -> torch.Tensor:
    return torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))


def quantize_fp8(w: torch.Tensor, scheme: Fp8Scheme = Fp8Scheme()) -> Fp8Matrix:
    """Quantise a float matrix [out, in] to e4m3 with `scheme`'s scales (computed in float32)."""
    if w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"fp8 quantisation takes a 2-D float matrix, got {w.dtype} {list(w.shape)}")
    x = w.float()
    if not bool(torch.isfinite(x).all()):
        raise ValueError("fp8 quantisation: the matrix holds a non-finite value")
    out, cols = x.shape
    g = scheme.granularity
    if g == "tensor":
        scale = _scales_from_amax(x.abs().amax())
        full = scale.expand(out, cols)
    elif g == "channel":
        scale = _scales_from_amax(x.abs().amax(dim=1))
        full = scale[:, None]
    else:
        br, bc = scheme.block
        nr, nc = -(-out // br), -(-cols // bc)
        padded = torch.zeros(nr * br, nc * bc, dtype=torch.float32, device=x.device)
        padded[:out, :cols] = x.abs()
        scale = _scales_from_amax(padded.view(nr, br, nc, bc).amax(dim=(1, 3)))
        full = scale.repeat_interleave(br, dim=0).repeat_interleave(bc, dim=1)[:out, :cols]
    data = (x / full).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return Fp8Matrix(data, scale.contiguous(), g, tuple(scheme.block))  # type: ignore[arg-type]
