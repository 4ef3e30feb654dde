"""profiler/code_map.py on a synthetic ncu source export: regions split at long never-executed runs."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from profiler.code_map import executed_regions, render
from profiler.ncu_source import load_source_csv
from tests.profiler.test_ncu_source import _write


def _export(tmp_path: Path, executed: list[int], texts: dict[int, str]) -> Path:
    base = 0x7F0000000000
    rows = [[hex(base + 16 * k), texts.get(k, f"  INSTR{k} R1, R2"), "3", "3", str(e), "1", "1", "1", "0"]
            for k, e in enumerate(executed)]
    return _write(tmp_path / "s.csv", rows, False)


def test_regions_split_at_long_cold_runs_and_count_instructions(tmp_path: Path) -> None:
    rng = random.Random()
    hot = [rng.randrange(1, 500) for _ in range(12)]
    # 5 hot, 2 cold (32 B: same region), 4 hot, 20 cold (320 B: a new region), 3 hot
    executed = hot[:5] + [0, 0] + hot[5:9] + [0] * 20 + hot[9:12]
    texts = {1: "  HMMA.16816.F32.BF16 R4, R8, R12, R4", 32: "  MUFU.EX2 R3, R2", 20: "  MUFU.SIN R3, R2"}
    regions = executed_regions(load_source_csv(_export(tmp_path, executed, texts)), max_gap=256)
    assert [(c.lo, c.hi, c.instructions) for c in regions] == [(0, 16 * 11, 9), (16 * 31, 16 * 34, 3)]
    assert regions[0].executions == sum(hot[:9]) and regions[1].executions == sum(hot[9:])
    assert regions[0].markers == ("HMMA",) and regions[1].markers == ("MUFU.EX2",)  # cold MUFU.SIN not counted
    assert regions[0].kib == pytest.approx(9 * 16 / 1024)
    text = render(regions, top=1)
    assert "2 executed regions, 12 instructions" in text and "HMMA" in text and "MUFU.EX2" not in text
    # A smaller gap splits the first region too.
    assert len(executed_regions(load_source_csv(_export(tmp_path, executed, texts)), max_gap=16)) == 3
