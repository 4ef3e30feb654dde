from __future__ import annotations

import numpy as np
import pytest

from engine.instructions.format import W_ID, W_OPCODE
from profiler.marks import INTERVALS, mark_stats, render_marks
from profiler.record import ProfileRecord, concat_records, load_npz, save_npz
from profiler.summary import summarize


def _record(t0: int) -> ProfileRecord:
    # Two instructions of op A with every mark, one of op B without marks (e.g. the argmax).
    words = np.zeros((3, 32), np.int32)
    words[:, W_OPCODE] = [1, 1, 2]
    words[:, W_ID] = [0, 1, 2]
    start = np.array([0, 10, 30]) + t0
    wait = np.array([2, 4, 1])
    end = np.array([20, 40, 35]) + t0
    # marks: input, last page, computed, loader, last done, first page; ready = 2 and 14
    marks = np.array([[5, 9, 12, 1, 11, 6], [16, 0, 30, 20, 0, 18], [0] * 6], np.int64)
    marks = np.where(marks != 0, marks + t0, 0)
    # then the last page's SM cycles: a count, not shifted by t0 (the second never reached that page)
    marks = np.concatenate([marks, np.array([[3], [0], [0]], np.int64)], axis=1)
    return ProfileRecord(words=words, sm=np.array([0, 1, 0], np.int32), start_ns=start, end_ns=end, wait_ns=wait,
                         opcode_names={1: "A", 2: "B"}, simulated=False, marks_ns=marks)


def test_mark_intervals_are_hand_computed_and_skip_unreached_marks(rng):
    rec = _record(int(rng.integers(1, 2**40)))
    (a,) = mark_stats(rec)  # B has no marks at all: no row
    assert (a.name, a.count) == ("A", 2)
    inp, first_page, weights, last_page, join, epilogue, lead = a.means_ns
    assert inp == pytest.approx(np.mean([5 - 2, 16 - 14]))
    assert first_page == pytest.approx(np.mean([6 - 5, 18 - 16]))
    assert weights == pytest.approx(9 - 5)  # the second instruction never reached its last-page mark
    assert last_page == pytest.approx(11 - 9)
    assert join == pytest.approx(12 - 11)
    assert epilogue == pytest.approx(np.mean([20 - 12, 40 - 30]))
    assert lead == pytest.approx(np.mean([2 - 1, 14 - 20]))
    assert a.page_cycles == pytest.approx(3)
    text = "\n".join(render_marks([a]))
    assert all(name in text for name in INTERVALS) and "A" in text and "page cyc" in text


def test_marks_survive_npz_concat_and_summary(tmp_path, rng):
    rec = _record(int(rng.integers(1, 2**40)))
    back = load_npz(save_npz(rec, tmp_path / "raw.npz"))
    np.testing.assert_array_equal(back.marks_ns, rec.marks_ns)
    both = concat_records([rec, back])
    assert both.marks_ns.shape == (6, 7)
    assert "inside instructions" in summarize(both).text()
    plain = ProfileRecord(words=rec.words, sm=rec.sm, start_ns=rec.start_ns, end_ns=rec.end_ns, wait_ns=rec.wait_ns,
                          opcode_names=rec.opcode_names, simulated=False)
    assert mark_stats(plain) == [] and "inside instructions" not in summarize(plain).text()
    assert concat_records([rec, plain]).marks_ns is None


def test_records_with_fewer_mark_columns_leave_those_intervals_unmeasured(rng):
    rec = _record(int(rng.integers(1, 2**40)))
    narrow = ProfileRecord(words=rec.words, sm=rec.sm, start_ns=rec.start_ns, end_ns=rec.end_ns, wait_ns=rec.wait_ns,
                           opcode_names=rec.opcode_names, simulated=False, marks_ns=rec.marks_ns[:, :4])
    (a,) = mark_stats(narrow)
    means = dict(zip(INTERVALS, a.means_ns))
    assert means["1st page"] is None and means["last page"] is None and means["join"] is None
    assert means["weights"] == pytest.approx(4)
    assert a.page_cycles is None
