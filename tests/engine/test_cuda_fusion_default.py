"""The cuda backend's default for fusing batch-1 attention with its O-proj slice (engine/cuda/fusion.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.cuda.fusion import FUSED_MAX_W_O_PAGES_PER_SM, PANEL_COLS, fused_split_defaults
from engine.instructions.layout import ModelDims
from models.llama.presets import preset_config

PAGE = 16384


def dims(preset: str) -> ModelDims:
    return ModelDims.from_config(preset_config(preset))


def test_1b_fuses_one_head_per_instruction() -> None:
    d = dims("llama-3.2-1b")  # one layer's W_o: 8 MiB, 4 pages per SM on 132 SMs
    assert fused_split_defaults(d, 132, PAGE, True, True, True) == {"fuse_o_proj": True, "fused_head_chunks": d.gqa}


@pytest.mark.parametrize("preset", ["llama-3.2-3b", "llama-3.1-8b"])
def test_larger_w_o_stays_split(preset: str) -> None:
    assert fused_split_defaults(dims(preset), 132, PAGE, True, True, True) == {"fuse_o_proj": False}


def test_bound_is_on_w_o_pages_per_sm() -> None:
    d = dims("llama-3.2-1b")
    w_o = d.hidden * d.n_heads * d.head_dim * 2
    fewest_sms = -(-w_o // (FUSED_MAX_W_O_PAGES_PER_SM * PAGE))
    assert fused_split_defaults(d, fewest_sms, PAGE, True, True, True)["fuse_o_proj"]
    assert not fused_split_defaults(d, fewest_sms - 1, PAGE, True, True, True)["fuse_o_proj"]


@pytest.mark.parametrize("panels,kv_ring", [(False, True), (True, False)])
def test_needs_panel_pages_and_the_kv_ring(panels: bool, kv_ring: bool) -> None:
    assert fused_split_defaults(dims("llama-3.2-1b"), 132, PAGE, panels, kv_ring, True) == {"fuse_o_proj": False}


def test_head_dim_not_whole_panels_stays_split() -> None:
    d = dims("llama-3.2-1b")
    d32 = ModelDims(d.hidden, d.intermediate, d.layers, d.n_heads * 2, d.n_kv, 32, d.vocab, d.eps)
    assert fused_split_defaults(d32, 132, PAGE, True, True, True) == {"fuse_o_proj": False}


def test_slow_memory_stays_split() -> None:
    """An H100-class device (device_tuning: fuse_small_w_o False) keeps the split path even for the 1B."""
    assert fused_split_defaults(dims("llama-3.2-1b"), 132, PAGE, True, True, False) == {"fuse_o_proj": False}


def test_panel_width_matches_the_kernel() -> None:
    """fusion.PANEL_COLS mirrors csrc/interpreter/panel_pages.cuh (the rule needs whole panels per head)."""
    header = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "panel_pages.cuh"
    cols = int(re.search(r"inline constexpr int PANEL_COLS = (\d+);", header.read_text()).group(1))
    assert cols == PANEL_COLS
