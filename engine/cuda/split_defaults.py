"""The scheduler's split keywords (SplitParams) that the cuda backend fills in from the interpreter's limits, the
model's widths and the kernel's options: how many x rows a matvec pass takes, how many tokens a step holds, where
steps of many tokens run as tiles, how batch-1 decode cuts its MLP, where batch-1 attention is fused with its O-proj.
Plain Python over InterpreterLimits (no GPU), so every default is checked on a CPU
(tests/engine/test_split_defaults.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.cuda.fusion import fused_split_defaults
from engine.cuda.kernel_options import DEFAULT_TILE_MIN_TOKENS, KernelOptions
from engine.cuda.limits import InterpreterLimits
from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_tiles import tiles_fit


@dataclass(frozen=True)
class StepLimits:
    """What the backend itself keeps of the defaults."""

    token_group: int  # activation rows per matvec pass (csrc/interpreter/token_groups.cuh, Globals::token_group)
    max_tokens_per_step: int
    bf16_rows: bool  # several x rows in bf16 for the tensor cores (KernelOptions.mma_matvec, bf16 weights)
    w_o_panels: bool  # W_o's slices as panel pages (KernelOptions.w_o_panels, a bf16 W_o): the backend encodes its map


def fill_split_defaults(split_kw: dict[str, Any], limits: InterpreterLimits, dims: ModelDims, kernel: KernelOptions,
                        *, fp8: bool, w_o_fp8: bool, num_sms: int, fast_memory: bool) -> StepLimits:
    """Set in `split_kw` every SplitParams keyword the caller left out that the kernel decides; `fp8`: the streamed
    matrices are fp8 (`w_o_fp8`: W_o is); `fast_memory`: the device's DeviceTuning.fuse_small_w_o. ValueError when
    the caller's own token_group exceeds what the model's matvecs take."""
    # Several x rows in bf16 for the tensor cores (KernelOptions.mma_matvec); an fp8 stream's take the CUDA cores
    # in fp32 (csrc/interpreter/x_layout.cuh x_is_bf16), so x holds fewer of them and the LM head is never direct.
    bf16_rows = kernel.mma_matvec and not fp8
    mlp_slices = split_kw.get("mlp_slices")
    # The builder cuts blocks for the kernel's token group (their outputs fit `out` for that many rows)
    group = limits.token_group(dims, mlp_slices, bf16_rows, kernel.mma_token_group)
    asked = split_kw.get("token_group")
    if asked is not None and not 1 <= int(asked) <= group:
        raise ValueError(f"token_group {asked}: this model's matvecs take at most {group} rows of x at once")
    token_group = int(asked) if asked is not None else group
    # Steps of more than one token group (or of DEFAULT_TILE_MIN_TOKENS): their linear layers as tensor-core tiles
    # (KernelOptions.tile_matmul), on bf16 weights (the tiles' boxes are bf16) where the model's widths take them
    tiles = kernel.tile_matmul and not fp8 and tiles_fit(dims)
    max_tokens = limits.max_tokens(dims, mlp_slices, bf16_rows, kernel.mma_token_group, tiles)
    if max_tokens > token_group:  # steps of several token groups
        split_kw.setdefault("token_group", token_group)
        split_kw.setdefault("held_pages", limits.min_ring_pages)
        split_kw.setdefault("page_bytes", limits.page_bytes)
    if kernel.lm_head_direct and bf16_rows and limits.row_takes_mma(dims.hidden):
        split_kw.setdefault("lm_head_direct_max_seqs", min(token_group, limits.mma_group_cap))
    # Batch-1 decode: MLP K-slices as wide as x holds at the largest ring that still holds the hidden size, so the
    # down projection waits and adds per slice as few times as it can; at most a quarter page of floats, so a page
    # holds two or more down rows of a slice; in whole tensor-core chunks.
    split_kw.setdefault("one_token_slice_floats", limits.one_token_slice_floats(dims, kernel.mma_matvec))
    split_kw.setdefault("one_token_slice_unit", limits.mma_chunk)  # down pages on the tensor cores
    split_kw.setdefault("max_out_floats", limits.out_floats)
    if tiles:
        split_kw.setdefault("tile_min_tokens", min(token_group + 1, DEFAULT_TILE_MIN_TOKENS))
    # Batch-1 attention fused with its O-proj slice where one layer's W_o is small per SM and memory is fast
    # (engine/cuda/fusion.py, device_tuning.py); W_o's panel pages are bf16 boxes: an fp8 W_o streams as rows (and
    # batch-1 attention is not fused with it)
    w_o_panels = kernel.w_o_panels and not w_o_fp8
    fused = fused_split_defaults(dims, num_sms, limits.page_bytes, w_o_panels, kernel.attn_kv_ring, fast_memory)
    split_kw.setdefault("fuse_max_tokens", limits.max_tokens_per_matvec)
    if split_kw.setdefault("fuse_o_proj", fused["fuse_o_proj"]) and fused["fuse_o_proj"]:
        split_kw.setdefault("fused_head_chunks", fused["fused_head_chunks"])
    return StepLimits(token_group, max_tokens, bf16_rows, w_o_panels)
