"""KV-cache sizing on a GPU from --gpu-memory-utilization, against a faked device memory report."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.engine_config import EngineConfig, kv_bytes_per_page, size_kv_cache
from models.llama.presets import preset_config

GIB = 2**30
MODEL = preset_config("llama-3.2-1b")


def _size(monkeypatch: pytest.MonkeyPatch, free: int, total: int, reserve: int, **kw: object) -> tuple[int, int]:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    cfg = EngineConfig(model="m", max_num_seqs=1024, **kw)  # type: ignore[arg-type]
    return size_kv_cache(cfg, MODEL, torch.device("cuda"), reserve)


def test_the_cache_gets_what_the_utilization_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    per_page = kv_bytes_per_page(MODEL, 16, torch.bfloat16)
    pages, _len = _size(monkeypatch, free=70 * GIB, total=80 * GIB, reserve=3 * GIB)
    assert pages == (int(0.9 * 80 * GIB) - 13 * GIB) // per_page  # 72 GiB allowed, 10 + 3 GiB held
    smaller, _ = _size(monkeypatch, free=70 * GIB, total=80 * GIB, reserve=3 * GIB, gpu_memory_utilization=0.5)
    assert smaller == (40 * GIB - 13 * GIB) // per_page


def test_too_small_a_utilization_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="gpu_memory_utilization 0.1 leaves no room for the KV cache"):
        _size(monkeypatch, free=70 * GIB, total=80 * GIB, reserve=3 * GIB, gpu_memory_utilization=0.1)


@pytest.mark.parametrize("value", [0.0, -0.5, 1.01])
def test_utilization_outside_0_1_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        EngineConfig(model="m", gpu_memory_utilization=value)


def test_stored_heads_size_the_pages() -> None:
    """A backend that stores heads padded (head_dim 80 in 128: engine/instructions/head_padding.py) sizes its pages
    at the stored width."""
    cfg = dataclasses.replace(MODEL, head_dim=80)
    assert kv_bytes_per_page(cfg, 16, torch.bfloat16, 128) == kv_bytes_per_page(cfg, 16, torch.bfloat16) * 128 // 80
