"""Timing events around a run's chunks of decode steps (engine/cuda/device_decode_run.py), for RunTimes.

Before the first launch of each chunk the host records a start event, and each chunk's readback records an end
event after its steps. On the device the start of chunk k runs as soon as chunk k-1's end did when the host had
launched it already (a gap of about a microsecond), or later, when the host reached it: that gap is the device's
idle time. Events are only read once the chunk they close is complete (the run's delivery waits for it anyway), so
timing adds no synchronisation."""
from __future__ import annotations

from collections import deque

import torch

from engine.run_times import RunTimes


class RunTimer:
    """Accumulates RunTimes over the runs it times: start_run, then chunk_started before each chunk's first launch,
    chunk_end at each readback (the end event to record), chunk_done in order as each chunk is handed over, and
    end_run."""

    def __init__(self) -> None:
        self.totals = RunTimes()
        self._starts: deque[torch.cuda.Event] = deque()
        self._first: torch.cuda.Event | None = None
        self._prev_end: torch.cuda.Event | None = None
        self._idle_ms = 0.0

    def start_run(self) -> None:
        self._starts.clear()
        self._first = self._prev_end = None
        self._idle_ms = 0.0

    def chunk_started(self) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._starts.append(event)

    @staticmethod
    def chunk_end() -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def chunk_done(self, end: torch.cuda.Event) -> None:
        """The oldest chunk is complete (its end event has been waited for)."""
        start = self._starts.popleft()
        if self._prev_end is None:
            self._first = start
        else:
            self._idle_ms += max(0.0, self._prev_end.elapsed_time(start))
        self._prev_end = end

    def end_run(self) -> None:
        if self._first is None or self._prev_end is None:
            return
        span_ms = self._first.elapsed_time(self._prev_end)
        self.totals = self.totals + RunTimes(1, span_ms / 1e3, min(self._idle_ms, span_ms) / 1e3)
