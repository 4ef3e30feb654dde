"""Device-to-device copy bandwidth: the practical memory-bandwidth ceiling the floor is built on.

One copy of an n-byte buffer reads n bytes and writes n bytes, so bandwidth = 2n / time. The GPU
buffer is large (2 GiB by default, capped by free memory) so launch latency and caches do not
matter; the best of several trials is reported because interference only ever slows a copy down.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.bench.timing import DeviceTimer, synchronize

GPU_COPY_BYTES = 2 << 30  # 2 GiB: far beyond L2 (50-60 MB on H100/H200)
CPU_COPY_BYTES = 64 << 20  # the CPU path only exists so CI exercises the code


@dataclass(frozen=True)
class BandwidthResult:
    gbps: float  # (bytes read + bytes written) / best time, in 1e9 bytes per second
    buffer_bytes: int  # size of the copied buffer
    copies_per_trial: int
    trials: int
    best_seconds: float  # best trial time (all copies of that trial)

    def to_dict(self) -> dict[str, float | int]:
        return {"gbps": self.gbps, "buffer_bytes": self.buffer_bytes,
                "copies_per_trial": self.copies_per_trial, "trials": self.trials,
                "best_seconds": self.best_seconds}


def default_buffer_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return CPU_COPY_BYTES
    free, _total = torch.cuda.mem_get_info(device)
    # Source + destination must fit with room to spare for the model the bench loads afterwards.
    return int(min(GPU_COPY_BYTES, free // 4) // 4096 * 4096)


def measure_copy_bandwidth(
    device: torch.device | str,
    buffer_bytes: int | None = None,
    trials: int = 10,
    copies_per_trial: int = 4,
) -> BandwidthResult:
    """Best-of-`trials` bandwidth of `dst.copy_(src)` on `device`."""
    dev = torch.device(device)
    nbytes = default_buffer_bytes(dev) if buffer_bytes is None else int(buffer_bytes)
    if nbytes <= 0 or trials <= 0 or copies_per_trial <= 0:
        raise ValueError(f"measure_copy_bandwidth: buffer_bytes={nbytes}, trials={trials}, "
                         f"copies_per_trial={copies_per_trial} must all be > 0")
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: first-touch page faults / lazy allocation
    synchronize(dev)
    timer = DeviceTimer(dev)
    best = float("inf")
    for _ in range(trials):
        timer.start()
        for _ in range(copies_per_trial):
            dst.copy_(src)
        best = min(best, timer.stop())
    del src, dst
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # give the 4 GiB back before the model is built
    best = max(best, 1e-9)  # a timer resolution of 0 must not divide by zero
    gbps = 2.0 * nbytes * copies_per_trial / best / 1e9
    return BandwidthResult(gbps=gbps, buffer_bytes=nbytes, copies_per_trial=copies_per_trial,
                           trials=trials, best_seconds=best)
