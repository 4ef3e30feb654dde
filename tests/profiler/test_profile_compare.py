"""`megakernel profile --compare A B`: deltas in text, both Gantts on one page."""
from __future__ import annotations

import json
import re

import numpy as np
from synthetic_profiles import make_chain_record

from engine.cli.profile import main
from profiler.compare import compare_text
from profiler.record import ProfileRecord, save_npz
from profiler.summary import summarize


def _hand(durations: list[int], opcodes: list[int]) -> ProfileRecord:
    n = len(durations)
    start = np.zeros(n, np.int64) + 5000
    return ProfileRecord(words=np.array([[o, i] for i, o in enumerate(opcodes)], np.int32), sm=np.arange(n),
                         start_ns=start, end_ns=start + np.array(durations), wait_ns=np.zeros(n, np.int64),
                         opcode_names={1: "A", 2: "B", 3: "C"}, simulated=False)


def test_compare_text_hand_computed():
    a = _hand([1000, 3000, 2000], [1, 1, 2])  # A: 4 µs total, B: 2 µs; makespan 3 µs
    b = _hand([1000, 1500, 4500], [1, 1, 3])  # A: 2.5 µs, C: 4.5 µs (new), B gone; makespan 4.5 µs
    text = compare_text(summarize(a), summarize(b), "before", "after")
    assert "A: before" in text and "B: after" in text
    assert "makespan: A 3.000 µs  B 4.500 µs  B-A +1.500 µs (+50.0%)" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if re.match(r"^[ABC] +[\d-]", line)}
    assert rows["A"][1:6] == ["2", "2", "4.000", "2.500", "-1.500"]
    assert rows["B"][1:6] == ["1", "-", "2.000", "-", "-2.000"]
    assert rows["C"][1:6] == ["-", "1", "-", "4.500", "+4.500"]
    order = [line.split()[0] for line in text.splitlines() if re.match(r"^[ABC] +[\d-]", line)]
    assert order == ["C", "B", "A"]  # largest change first


def test_cli_compare_writes_text_and_one_page(tmp_path, rng, capsys):
    save_npz(make_chain_record(rng, layers=3), tmp_path / "a" / "raw.npz")
    save_npz(make_chain_record(rng, layers=5), tmp_path / "b" / "raw.npz")
    out = tmp_path / "cmp"
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b" / "raw.npz"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "makespan: A" in printed and "per opcode" in printed and "compare.html" in printed
    assert (out / "compare.txt").read_text() in printed
    page = (out / "compare.html").read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert [p["label"] for p in data["panels"]] == [f"A: {tmp_path / 'a'}", f"B: {tmp_path / 'b' / 'raw.npz'}"]
    assert all(p["deps"] and p["marks"] for p in data["panels"])


def test_cli_compare_bad_input_is_one_line(tmp_path, rng, capsys):
    save_npz(make_chain_record(rng, layers=2), tmp_path / "a" / "raw.npz")
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
