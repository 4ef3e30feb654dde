"""Timing of device work: CUDA events on a CUDA device, `time.perf_counter` elsewhere.

Both paths synchronise before starting and after stopping, so the measured interval covers all the
work enqueued in between (including GPU idle gaps caused by slow host-side launches, which is exactly
what separates eager PyTorch from a CUDA graph).
"""
from __future__ import annotations

import time

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DeviceTimer:
    """One-shot interval timer: `start()`, enqueue work, `stop()` returns elapsed seconds."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._use_events = device.type == "cuda"
        self._t0 = 0.0
        self._started = False
        if self._use_events:
            self._start_ev = torch.cuda.Event(enable_timing=True)
            self._end_ev = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        synchronize(self.device)
        if self._use_events:
            self._start_ev.record()
        else:
            self._t0 = time.perf_counter()
        self._started = True

    def stop(self) -> float:
        if not self._started:
            raise RuntimeError("DeviceTimer.stop() called before start()")
        self._started = False
        if self._use_events:
            self._end_ev.record()
            self._end_ev.synchronize()
            return self._start_ev.elapsed_time(self._end_ev) / 1000.0  # ms -> s
        return time.perf_counter() - self._t0
