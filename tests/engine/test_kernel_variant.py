"""Which interpreter variant a stream runs (engine/cuda/variant.py): the batch-1 variants hold only the paths of
one sequence's one new token with its attention on the KV ring, so anything else must get the general kernel."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from engine.cuda.kernel_options import KernelOptions
from engine.cuda.variant import (VARIANT_BATCH1_FUSED, VARIANT_BATCH1_SPLIT, VARIANT_GENERAL, VARIANT_NAMES,
                                 VARIANT_TILES_TALL, kernel_variant)
from engine.instructions.layout import ModelDims, StepShape
from models.llama.presets import preset_config

DIMS = ModelDims.from_config(preset_config("llama-3.2-1b"))  # head_dim 64
OPTS = KernelOptions(max_inflight_pages=4, chain_inflight_pages=2)
PAGE = 16384  # the kernel's ring page (config.cuh PAGE_BYTES)


@pytest.mark.parametrize("fused,want", [(True, VARIANT_BATCH1_FUSED), (False, VARIANT_BATCH1_SPLIT)])
def test_batch1_decode_runs_the_variant_of_its_attention_path(fused: bool, want: int) -> None:
    assert kernel_variant(StepShape(1, 1, 16), DIMS, 16, fused, OPTS, PAGE, True) == want


@pytest.mark.parametrize("shape", [StepShape(8, 1, 16), StepShape(2, 2, 16), StepShape(4, 1, 1)],
                         ids=["prefill-chunk", "two-sequences", "four-tokens"])
def test_more_than_one_token_runs_the_general_kernel(shape: StepShape) -> None:
    assert kernel_variant(shape, DIMS, 16, True, OPTS, PAGE, True) == VARIANT_GENERAL


def test_attention_off_the_ring_runs_the_general_kernel() -> None:
    one = StepShape(1, 1, 16)
    assert kernel_variant(one, DIMS, 16, False, KernelOptions(attn_kv_ring=False), PAGE, True) == VARIANT_GENERAL
    # 64 tokens x 64 dims x (K + V) x bf16 = 16 KB fits a ring page; 128 tokens do not (kv_stream.cuh's kvpp_max = 0)
    assert kernel_variant(one, DIMS, 64, False, OPTS, PAGE, True) == VARIANT_BATCH1_SPLIT
    assert kernel_variant(one, DIMS, 128, False, OPTS, PAGE, True) == VARIANT_GENERAL


@pytest.mark.parametrize("head_dim,batch1", [(80, True), (100, True), (128, True), (256, False)])
def test_head_dims_past_the_batch1_variants_run_the_general_kernel(head_dim: int, batch1: bool) -> None:
    """The batch-1 variants' attention holds stored head dims up to 128 (80 and 100 are stored as 128)."""
    d = ModelDims.from_config(dataclasses.replace(preset_config("llama-3.2-1b"), head_dim=head_dim))
    got = kernel_variant(StepShape(1, 1, 16), d, 16, False, OPTS, PAGE, True)
    assert got == (VARIANT_BATCH1_SPLIT if batch1 else VARIANT_GENERAL)


def test_rows_off_the_tensor_cores_run_the_general_kernel() -> None:
    """The batch-1 variants hold only the tensor-core page loop: the option off, or any row too short or not of
    whole 128-element chunks (the caller's `rows_take_mma`), takes the general kernel."""
    one = StepShape(1, 1, 16)
    assert kernel_variant(one, DIMS, 16, True, OPTS, PAGE, False) == VARIANT_GENERAL
    no_mma = KernelOptions(max_inflight_pages=4, chain_inflight_pages=2, mma_matvec=False)
    assert kernel_variant(one, DIMS, 16, True, no_mma, PAGE, True) == VARIANT_GENERAL


def test_the_option_off_runs_the_general_kernel() -> None:
    off = KernelOptions(batch1_kernel=False)
    assert kernel_variant(StepShape(1, 1, 16), DIMS, 16, True, off, PAGE, True) == VARIANT_GENERAL


def test_variant_numbers_are_the_kernels() -> None:
    """engine/cuda/variant.py's numbers are csrc/interpreter/config.cuh's KernelVariant (the launch picks by them)."""
    text = (Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "config.cuh").read_text()
    enum = dict(re.findall(r"(VARIANT_\w+) = (\d+),", text))
    assert {k: int(v) for k, v in enum.items()} == {"VARIANT_GENERAL": VARIANT_GENERAL,
                                                   "VARIANT_BATCH1_SPLIT": VARIANT_BATCH1_SPLIT,
                                                   "VARIANT_BATCH1_FUSED": VARIANT_BATCH1_FUSED,
                                                   "VARIANT_TILES_TALL": VARIANT_TILES_TALL}


def test_every_variant_has_a_name_for_the_profile() -> None:
    assert sorted(VARIANT_NAMES) == [VARIANT_GENERAL, VARIANT_BATCH1_SPLIT, VARIANT_BATCH1_FUSED, VARIANT_TILES_TALL]
    assert len(set(VARIANT_NAMES.values())) == 4


def test_a_stream_with_tall_tiles_runs_the_tall_tile_variant() -> None:
    assert kernel_variant(StepShape(2048, 1, 16), DIMS, 16, False, OPTS, PAGE, True, tall_tiles=True) == VARIANT_TILES_TALL
    assert kernel_variant(StepShape(2048, 1, 16), DIMS, 16, False, OPTS, PAGE, True) == VARIANT_GENERAL
