"""The split keywords the cuda backend fills in (engine/cuda/split_defaults.py), on the CPU with the interpreter's
limits read from its headers: the 1B's token groups of 16, tiles past one group, the LM head written directly, the
batch-1 fused attention on fast memory only; fp8 streams on the CUDA cores; the 8B's groups of 8; the caller's own
keywords kept."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.cuda.kernel_options import KernelOptions
from engine.cuda.limits import InterpreterLimits
from engine.cuda.split_defaults import fill_split_defaults
from engine.instructions.layout import ModelDims
from models.llama.presets import preset_config

CSRC = Path(__file__).resolve().parents[2] / "csrc" / "interpreter"


def _constant(header: str, name: str) -> int:
    return int(re.search(rf"inline constexpr int {name} = (\d+);", (CSRC / header).read_text()).group(1))


def _limits() -> InterpreterLimits:
    """InterpreterLimits as InterpreterLimits.of(the built module) gives them (the constants it reads)."""
    c = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", (CSRC / "config.cuh").read_text())}
    return InterpreterLimits(c["PAGE_BYTES"], c["X_FLOATS"], c["OUT_FLOATS"], c["MAX_TOKENS_PER_MATVEC"],
                             c["MAX_GQA"], c["MIN_RING_PAGES"], c["MAX_RING_PAGES"], c["NUM_CONSUMER_WARPS"],
                             mma_chunk=_constant("dot_rows_mma.cuh", "MMA_CHUNK"),
                             short_row_max_k=_constant("dot_short_rows.cuh", "SHORT_ROW_MAX_K"),
                             x_row_skew=c["X_ROW_SKEW"], max_tokens_per_step=c["MAX_TOKENS_PER_STEP"],
                             max_token_group=c["MAX_TOKEN_GROUP"])


def _fill(preset: str, split_kw: dict | None = None, *, fp8: bool = False, fast_memory: bool = True,
          **kernel: object) -> tuple[dict, object]:
    kw = dict(split_kw or {})
    step = fill_split_defaults(kw, _limits(), ModelDims.from_config(preset_config(preset)), KernelOptions(**kernel),
                               fp8=fp8, w_o_fp8=fp8, num_sms=132, fast_memory=fast_memory)
    return kw, step


def test_the_1b_on_fast_memory() -> None:
    kw, step = _fill("llama-3.2-1b")
    assert (step.token_group, step.bf16_rows, step.w_o_panels) == (16, True, True)
    assert step.max_tokens_per_step == _limits().max_tokens_per_step
    assert kw["token_group"] == 16 and kw["held_pages"] == 9 and kw["page_bytes"] == 16384
    assert kw["tile_min_tokens"] == 9 and kw["lm_head_direct_max_seqs"] == 16
    assert kw["one_token_slice_unit"] == 128 and kw["max_out_floats"] == _limits().out_floats
    assert kw["fuse_o_proj"] is True and kw["fused_head_chunks"] == 4 and kw["fuse_max_tokens"] == 8


def test_slower_memory_keeps_batch1_attention_apart_from_its_o_proj() -> None:
    kw, _ = _fill("llama-3.2-1b", fast_memory=False)
    assert kw["fuse_o_proj"] is False and "fused_head_chunks" not in kw


def test_fp8_streams_take_the_cuda_cores_and_no_tiles() -> None:
    kw, step = _fill("llama-3.2-1b", fp8=True)
    assert not step.bf16_rows and not step.w_o_panels and step.token_group == 8
    assert "tile_min_tokens" not in kw and "lm_head_direct_max_seqs" not in kw
    assert kw["fuse_o_proj"] is False


def test_the_8b_groups_eight_rows_and_tiles_past_them() -> None:
    kw, step = _fill("llama-3.1-8b")
    assert step.token_group == 8 and step.max_tokens_per_step > 8 and kw["tile_min_tokens"] == 9
    assert kw["fuse_o_proj"] is False  # one layer's W_o is more than 4 ring pages per SM


def test_the_callers_keywords_stay_and_a_token_group_past_the_models_is_refused() -> None:
    kw, step = _fill("llama-3.2-1b", {"fuse_o_proj": False, "token_group": 8, "tile_min_tokens": None})
    assert step.token_group == 8 and kw["token_group"] == 8 and kw["tile_min_tokens"] is None
    assert kw["fuse_o_proj"] is False and "fused_head_chunks" not in kw
    with pytest.raises(ValueError, match="token_group 32: this model's matvecs take at most 16"):
        _fill("llama-3.2-1b", {"token_group": 32})


def test_tiles_off_leaves_no_tile_threshold() -> None:
    kw, step = _fill("llama-3.2-1b", tile_matmul=False)
    assert "tile_min_tokens" not in kw and step.token_group == 16
