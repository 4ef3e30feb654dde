"""dev/code_map.py on a synthetic ncu source export: regions split at long never-executed runs."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from dev.code_map import executed_regions, render
from dev.ncu_source import load_source_csv
from dev.tests.test_ncu_source import _write


def _export(tmp_path: Path, executed: list[int], texts: dict[int, str], no_inst: list[int] | None = None) -> Path:
    base = 0x7F0000000000
    fetch = no_inst or [1] * len(executed)
    rows = [[hex(base + 16 * k), texts.get(k, f"  INSTR{k} R1, R2"), str(2 + f), str(2 + f), str(e), "1", "1", str(f),
             "0"] for k, (e, f) in enumerate(zip(executed, fetch))]
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


def test_regions_sum_instruction_fetch_stalls_and_rank_by_them(tmp_path: Path) -> None:
    rng = random.Random()
    # 8 instructions with few fetch stalls, 20 cold, 4 with many (at 0x1c0)
    executed = [rng.randrange(1, 500) for _ in range(8)] + [0] * 20 + [rng.randrange(1, 500) for _ in range(4)]
    no_inst = [rng.randrange(0, 9) for _ in range(8)] + [0] * 20 + [rng.randrange(40, 90) for _ in range(4)]
    regions = executed_regions(load_source_csv(_export(tmp_path, executed, {}, no_inst)))
    assert [c.fetch_samples for c in regions] == [sum(no_inst[:8]), sum(no_inst[28:])]
    by_size, by_fetch = render(regions, top=1), render(regions, top=1, by_fetch=True)
    assert f"{sum(no_inst):.0f} fetch-stall samples" in by_size
    assert "[0x0001c0" in by_fetch and "[0x000000" in by_size
