"""fp8 matrices (models/llama/fp8.py) packed into the interpreter's weight buffers: the e4m3 bytes permuted as
packing.py permutes bf16 rows and columns, and beside each such buffer `<name>_scale`, float32 [..., rows, blocks]:
one scale per packed row and block of `SCALE_COLS` columns (`<name>_scale_cols`, a 0-d int tensor, holds it).

One layout serves every granularity: a per-tensor or per-channel scale is constant along a row (one block: the
row's width), a 128 x 128 block scale along each 128 columns of it. The rows of every matrix are permuted (QKV's
head order and RoPE pairs, gate/up tiles) while the row-wise scales follow them; head padding inserts zero columns
into W_o, which a block scale's columns must not straddle (refused, naming the buffer).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from models.llama.fp8 import FP8_DTYPE, Fp8Matrix
from models.llama.weights import Matrix, dense

SCALE_SUFFIX, COLS_SUFFIX = "_scale", "_scale_cols"
# What a 2-D transform of packing.py does to one layer's matrices (cat, row/column selection, padding).
Transform = Callable[[Sequence[torch.Tensor]], torch.Tensor]


def _block_cols(ms: Sequence[Fp8Matrix], width: int) -> int:
    blocks = {m.block[1] for m in ms if m.granularity == "block"}
    if len(blocks) > 1:
        raise ValueError(f"fp8 matrices packed together have different block widths {sorted(blocks)}")
    return blocks.pop() if blocks else width


def pack_fp8(name: str, layers: Sequence[Sequence[Matrix]], transform: Transform, dtype: torch.dtype,
             stacked: bool = True) -> dict[str, torch.Tensor]:
    """Buffer `name` stacked over `layers` (each a list of one layer's matrices that `transform` packs into one),
    in `dtype` where no matrix is fp8, else as e4m3 bytes with `name`_scale (see the module docstring). A layer
    mixing fp8 and plain matrices is dequantised to `dtype` (a pre-quantized checkpoint that left some out).
    `stacked` False: one layer, its buffers without the layer dimension (the embedding, the LM head)."""
    if not stacked and not any(isinstance(m, Fp8Matrix) for m in layers[0]):
        return {name: transform(layers[0]).to(dtype).contiguous()}  # type: ignore[arg-type]
    out = _pack(name, layers, transform, dtype)
    if not stacked:
        out = {k: v[0] if v.dim() > 0 else v for k, v in out.items()}
    return out


def _pack(name: str, layers: Sequence[Sequence[Matrix]], transform: Transform,
          dtype: torch.dtype) -> dict[str, torch.Tensor]:
    flat = [m for layer in layers for m in layer]
    if not any(isinstance(m, Fp8Matrix) for m in flat):
        return {name: torch.stack([transform(layer) for layer in layers]).to(dtype).contiguous()}  # type: ignore[arg-type]
    if not all(isinstance(m, Fp8Matrix) for m in flat):
        plain = [[dense(m, dtype) for m in layer] for layer in layers]
        return {name: torch.stack([transform(layer) for layer in plain]).contiguous()}
    data = torch.stack([transform([m.data.view(torch.uint8) for m in layer]) for layer in layers])  # type: ignore[union-attr]
    full = torch.stack([transform([m.row_scales() for m in layer]) for layer in layers])  # type: ignore[union-attr]
    width = full.shape[-1]
    cols = _block_cols(flat, width)  # type: ignore[arg-type]
    nblocks = -(-width // cols)
    padded = torch.cat([full, full[..., -1:].expand(*full.shape[:-1], nblocks * cols - width)], dim=-1)
    blocks = padded.view(*full.shape[:-1], nblocks, cols)
    # zero columns inserted by head padding carry scale 0 next to real ones: those blocks are checked on their
    # real columns only
    real = blocks != 0
    lo = torch.where(real, blocks, torch.inf).amin(dim=-1)
    hi = torch.where(real, blocks, -torch.inf).amax(dim=-1)
    if bool(((lo != hi) & torch.isfinite(lo)).any()):
        raise ValueError(f"{name}: fp8 block scales straddle the packed layout's {cols}-column blocks (head padding "
                         "moved W_o's columns); quantise this checkpoint per channel")
    scale = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
    return {name: data.view(FP8_DTYPE).contiguous(), name + SCALE_SUFFIX: scale.contiguous(),
            name + COLS_SUFFIX: torch.tensor(cols)}


def dequantized_rows(weights: dict[str, torch.Tensor], name: str, index: tuple[object, ...]) -> torch.Tensor:
    """weights[name][index] as float32 values: times its scales where the buffer is fp8. `index` selects
    (layer, rows, columns) of a stacked buffer or (rows, columns) of an unstacked one; columns may be omitted."""
    w = weights[name][index].to(torch.float32)  # type: ignore[index]
    scale = weights.get(name + SCALE_SUFFIX)
    if scale is None:
        return w
    width = weights[name].shape[-1]
    cols = int(weights[name + COLS_SUFFIX])
    lead = index[: scale.dim() - 1]
    per_col = scale[lead].repeat_interleave(cols, dim=-1)[..., :width]  # type: ignore[index]
    tail = index[scale.dim() - 1:]
    return w * (per_col[(Ellipsis, *tail)] if tail else per_col)
