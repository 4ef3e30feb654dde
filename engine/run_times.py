"""How long the device spent on the engine's runs of decode steps, and how much of it waiting for the host.

A run queues its steps on the device ahead of the host (engine/cuda/device_decode_run.py); while the host keeps up,
the device goes from one step to the next without a gap. When the host's work per handed-over chunk (stop checks,
detokenising, outputs, the server's streams) takes longer than the device's steps, the queue drains and the device
idles until the host launches the next chunk. `idle_seconds / device_seconds` is that share: near 0 the device
bounds a server's decode throughput, well above it the host does (a server exports both as counters)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunTimes:
    """Cumulative over an engine's runs of decode steps, on the device's clock: `device_seconds` from each run's
    first step start to its last handed-over chunk's end, `idle_seconds` the gaps inside those spans where the
    device had no step queued (the host had not launched the next chunk yet)."""

    runs: int = 0
    device_seconds: float = 0.0
    idle_seconds: float = 0.0

    def __add__(self, other: RunTimes) -> RunTimes:
        return RunTimes(self.runs + other.runs, self.device_seconds + other.device_seconds,
                        self.idle_seconds + other.idle_seconds)
