"""Which compiled variant of the interpreter kernel runs a stream (csrc/interpreter/config.cuh KernelVariant).

Besides the general kernel, the module holds two batch-1 variants: the same interpreter compiled with only the
paths of one sequence's one new token (the one-row page matvec on the tensor cores only, and the ring attention)
and one attention path each (split: ATTN_PARTIAL + O_PROJ_RESIDUAL; fused: ATTN_O_PROJ): 239 / 237 KB of code
against the general kernel's 759 KB, and batch-1 decode runs faster on them (1B shape, same-run A/Bs: the
variants against the general kernel H200 0.794 -> 0.782 and 0.798 -> 0.786 ms/token, H100 0.976 -> 0.952;
leaving the CUDA-core page paths out of them 0.780 -> 0.772 and 0.787 -> 0.778 on the H200; docs/PERFORMANCE.md),
most likely because a layer's hot code is then spread over less of the instruction caches (not measured
directly; csrc/interpreter/code_size.cuh). The kernel
records an error, never guesses, if a stream it was given needs another path, so this rule must match what the
controller derives (csrc/interpreter/kv_stream.cuh: the ring attention needs the KV ring on and one KV page's
keys and values within a ring page) and what the page loop takes (consumer_matvec.cuh: the tensor cores need
the option on and rows of whole 128-element chunks). The variants also assume one token in their epilogues
(state.cuh token_index). A stream with tall tiles (SplitParams.tile_wide_rows=256) runs the tall-tile variant: the
general kernel whose TILE_MATMUL also takes them, compiled apart because their accumulators make ptxas spill the
general kernel's state (csrc/interpreter/config.cuh).
"""
from __future__ import annotations

from engine.cuda.kernel_options import KernelOptions
from engine.instructions.layout import ModelDims, StepShape

VARIANT_GENERAL, VARIANT_BATCH1_SPLIT, VARIANT_BATCH1_FUSED, VARIANT_TILES_TALL = 0, 1, 2, 3  # config.cuh KernelVariant
# The batch-1 variants' attention paths (ops/attn_partial.cuh, ops/attn_o_proj.cuh): head_dim 256's would spill
# their registers, so its batch-1 steps run the general kernel.
BATCH1_MAX_HEAD_DIM = 128
VARIANT_NAMES = {VARIANT_GENERAL: "general", VARIANT_BATCH1_SPLIT: "batch1-split", VARIANT_BATCH1_FUSED: "batch1-fused",
                 VARIANT_TILES_TALL: "tiles-tall"}


def kernel_variant(shape: StepShape, dims: ModelDims, page_size: int, fused: bool, kernel: KernelOptions,
                   ring_page_bytes: int, rows_take_mma: bool, tall_tiles: bool = False) -> int:
    """The variant for a stream of this shape; `fused`: its layers take ATTN_O_PROJ (the plan's choice);
    `rows_take_mma`: every weight row its page matvecs read runs on the tensor cores
    (InterpreterLimits.matvec_row_elems / row_takes_mma), the only page path the batch-1 variants hold;
    `tall_tiles`: its tile plan has tall tiles (TilePlan.tall)."""
    if tall_tiles:
        return VARIANT_TILES_TALL
    one_token = shape.num_tokens == 1 and shape.num_seqs == 1
    kv_page_fits = 2 * page_size * dims.head_dim * 2 <= ring_page_bytes  # bf16 keys and values of one KV page
    mma = kernel.mma_matvec and rows_take_mma
    head_ok = dims.head_dim <= BATCH1_MAX_HEAD_DIM
    if not (kernel.batch1_kernel and one_token and kernel.attn_kv_ring and kv_page_fits and mma and head_ok):
        return VARIANT_GENERAL
    return VARIANT_BATCH1_FUSED if fused else VARIANT_BATCH1_SPLIT
