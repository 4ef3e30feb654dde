from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from profiler.record import ProfileRecord
from profiler.summary import summarize


def _hand_record(simulated: bool, t0: int) -> ProfileRecord:
    # SM 0: A [0,10) overlapping B [5,20); SM 1: A [2,8), A [30,38). Raw times offset by t0.
    start = np.array([0, 5, 2, 30]) + t0
    end = np.array([10, 20, 8, 38]) + t0
    words = np.array([[1, 0], [2, 0], [1, 1], [1, 2]], np.int32)
    return ProfileRecord(words=words, sm=np.array([0, 0, 1, 1]), start_ns=start, end_ns=end,
                         wait_ns=np.array([1, 2, 3, 4]), opcode_names={1: "A", 2: "B"}, simulated=simulated,
                         bytes_moved=np.array([100, 200, 300, 400]), meta={"model": "hand"})


def test_summary_hand_computed(rng):
    s = summarize(_hand_record(True, int(rng.integers(1, 2**62))))
    assert s.makespan_ns == 38 and s.num_sms == 2 and s.num_instructions == 4
    a, b = {o.name: o for o in s.opcodes}["A"], {o.name: o for o in s.opcodes}["B"]
    assert (a.count, a.total_ns, a.mean_ns, a.p50_ns) == (3, 24, 8.0, 8.0)
    assert a.p99_ns == pytest.approx(9.96)  # linear interpolation between 8 and 10
    assert (b.count, b.total_ns, b.p50_ns, b.p99_ns) == (1, 15, 15.0, 15.0)
    assert [o.name for o in s.opcodes] == ["A", "B"]  # by total time
    # Busy is work only: A [0,10) waits 1 and B [5,20) waits 2, so SM 0 works [1,10) ∪ [7,20) = 19 ns.
    assert s.sm_busy[0] == pytest.approx(19 / 38)
    assert s.sm_busy[1] == pytest.approx((3 + 4) / 38)  # A [2,8) waits 3, A [30,38) waits 4
    assert s.wait_share == pytest.approx(10 / (2 * 38))
    assert (s.tail_idle_ns, s.first_done_sm, s.last_done_sm) == (18, 0, 1)
    assert s.total_bytes == 1000 and s.bandwidth_gb_s == pytest.approx(1000 / 38)
    text = s.text()
    assert text.startswith("SIMULATED") and "makespan 0.038 µs" in text and "26.3 GB/s" in text
    assert json.loads(s.to_json())["tail_idle_ns"] == 18


def test_summary_measured_and_unknown_bytes():
    rec = _hand_record(False, 1000)
    rec = replace(rec, bytes_moved=np.zeros(4, np.int64))
    s = summarize(rec)
    assert s.bandwidth_gb_s is None and "SIMULATED" not in s.text() and "bandwidth: unknown" in s.text()


def test_summary_rejects_empty():
    empty = ProfileRecord(words=np.zeros((0, 2), np.int32), sm=[], start_ns=[], end_ns=[], wait_ns=[],
                          opcode_names={}, simulated=True)
    with pytest.raises(ValueError, match="no instructions"):
        summarize(empty)


def test_busy_excludes_waiting():
    # One SM holding one instruction the whole time, waiting for its dependencies during 80% of it.
    rec = ProfileRecord(words=np.array([[1, 0]], np.int32), sm=np.array([0]), start_ns=np.array([100]),
                        end_ns=np.array([200]), wait_ns=np.array([80]), opcode_names={1: "A"}, simulated=False)
    s = summarize(rec)
    assert s.sm_busy[0] == pytest.approx(0.2) and s.wait_share == pytest.approx(0.8)
    text = s.text()
    assert "SM busy (working; dependency waits excluded): mean 20.0%" in text
    assert "waiting on dependencies: 80.0% of SM time" in text
    # A wait longer than the span (clock skew) leaves no work rather than negative work.
    skewed = replace(rec, wait_ns=np.array([150]))
    assert summarize(skewed).sm_busy[0] == 0.0
