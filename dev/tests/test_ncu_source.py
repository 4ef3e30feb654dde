"""dev/ncu_source.py on a synthetic export in ncu's `--page source --csv` layout."""
from __future__ import annotations

import csv
import gzip
import random
from pathlib import Path

import pytest

from dev.ncu_source import load_source_csv, region_cost, summary

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "# Samples", "Instructions Executed",
          "stall_barrier", "stall_long_sb", "stall_no_inst", "stall_barrier (Not Issued)"]


def _write(path: Path, rows: list[list[str]], gz: bool) -> Path:
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Kernel Name", "void mk::vm::megakernel<(bool)0>(mk::vm::Globals)"])
        w.writerow(HEADER)
        w.writerows(rows)
    return path


def _rows(rng: random.Random, n: int, base: int = 0x7F0000000000) -> tuple[list[list[str]], list[tuple]]:
    rows, truth = [], []
    for k in range(n):
        barrier, long_sb, no_inst = rng.randrange(50), rng.randrange(50), rng.randrange(50)
        executed = rng.randrange(1, 1000)
        samples = barrier + long_sb + no_inst
        rows.append([hex(base + 16 * k), f"  INSTR{k} R1, R2 ", str(samples), str(samples), str(executed),
                     str(barrier), str(long_sb), str(no_inst), str(barrier // 2)])
        truth.append((16 * k, samples, executed, barrier, long_sb, no_inst))
    return rows, truth


@pytest.mark.parametrize("gz", [False, True])
def test_loads_rows_with_offsets_and_reasons(tmp_path: Path, gz: bool) -> None:
    rng = random.Random()
    rows, truth = _rows(rng, 40)
    got = load_source_csv(_write(tmp_path / ("s.csv.gz" if gz else "s.csv"), rows, gz))
    assert [r.offset for r in got] == [t[0] for t in truth]
    assert [r.samples for r in got] == [t[1] for t in truth]
    assert got[3].text == "INSTR3 R1, R2"
    for r, t in zip(got, truth):  # the "(Not Issued)" duplicate is not counted twice
        assert r.stalls.get("barrier", 0) == t[3] and r.stalls.get("no_inst", 0) == t[5]


def test_region_cost_sums_samples_and_divides_by_entries(tmp_path: Path) -> None:
    rng = random.Random()
    rows, truth = _rows(rng, 30)
    got = load_source_csv(_write(tmp_path / "s.csv", rows, False))
    lo, hi = 16 * 5, 16 * 12
    c = region_cost(got, lo, hi)
    sel = [t for t in truth if lo <= t[0] < hi]
    assert c.samples == sum(t[1] for t in sel) and c.executions == max(t[2] for t in sel)
    assert c.per_execution(None) == pytest.approx(c.samples / c.executions)
    assert c.per_execution(2.5) == pytest.approx(2.5 * c.samples / c.executions)
    assert c.stalls["long_sb"] == sum(t[4] for t in sel)
    with pytest.raises(ValueError, match="no instruction"):
        region_cost(got, 10_000, 10_016)
    text = summary(got, 5, [(lo, hi)], 2.5)
    assert f"region [{lo:#x}, {hi:#x})" in text and "warp-µs" in text and "top 5 instructions" in text


def test_bad_inputs_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_source_csv(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="Address,Source"):
        load_source_csv(bad)
