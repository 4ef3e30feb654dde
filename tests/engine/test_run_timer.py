"""RunTimer's arithmetic over a run's chunk events (engine/cuda/run_timer.py), with events on a fake device clock:
the gaps between one chunk's end and the next one's start are the device's waits for the host."""
from __future__ import annotations

import pytest

from engine.run_times import RunTimes
from engine.cuda import run_timer


class _Clock:
    now_ms = 0.0


class _FakeEvent:
    """An event whose timestamp is the fake device clock's when recorded."""

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t = -1.0

    def record(self) -> None:
        self.t = _Clock.now_ms

    def elapsed_time(self, end: _FakeEvent) -> float:
        return end.t - self.t


@pytest.fixture
def timer(monkeypatch: pytest.MonkeyPatch) -> run_timer.RunTimer:
    monkeypatch.setattr(run_timer.torch.cuda, "Event", _FakeEvent)
    _Clock.now_ms = 0.0
    return run_timer.RunTimer()


def test_gaps_between_chunks_are_idle_time(timer: run_timer.RunTimer) -> None:
    timer.start_run()
    ends = []
    for gap_ms in (0.0, 0.0, 3.0, 0.5):  # before each chunk: how long the device waited for the host
        _Clock.now_ms += gap_ms
        timer.chunk_started()
        _Clock.now_ms += 10.0  # the chunk's steps
        ends.append(timer.chunk_end())
    for end in ends:
        timer.chunk_done(end)
    timer.end_run()
    assert timer.totals.runs == 1
    assert timer.totals.device_seconds == pytest.approx(0.0435)
    assert timer.totals.idle_seconds == pytest.approx(0.0035)


def test_runs_add_up_and_an_empty_run_adds_nothing(timer: run_timer.RunTimer) -> None:
    for _ in range(2):
        timer.start_run()
        timer.chunk_started()
        _Clock.now_ms += 4.0
        timer.chunk_done(timer.chunk_end())
        timer.end_run()
    timer.start_run()
    timer.end_run()  # no chunk delivered
    assert timer.totals == RunTimes(2, pytest.approx(0.008), 0.0)
