"""Defaults of the cuda backend that depend on the GPU's memory bandwidth, derived from the device's peak
(memory clock x bus width), not from its name or SM count. KernelOptions leaves these None (kernel_options.py
gives each option's reason); this module is the one place their values are set.

Same-run A/Bs on an H200 (4.8 TB/s peak) and an H100 (3.35 TB/s), ms/token of batch-1 decode:
- the loader's in-flight page cap: copies in flight should cover the bandwidth-delay product, which grows
  with the bandwidth. H200: 4 beats 3 (1B 0.811 -> 0.809 and 0.802 -> 0.799, 8B 4.177 -> 4.169); H100: 3
  beats 4 (1B 0.982 vs 0.986, 8B 5.283 vs 5.290);
- the cap while the chain runs (QKV, attention, O-proj): H200 2 beats 1 (1B 0.805 -> 0.800, 8B 4.080 -> 4.075,
  every round; 3: 0.816), H100 1 beats 2 (1B 0.979 vs 0.989, 8B 5.272 vs 5.277);
- fusing batch-1 attention with its O-proj slice (engine/cuda/fusion.py): H200 1B 0.809 -> 0.801, H100 1B
  0.982 vs 0.978 split at cap 3 (0.986 vs 0.983 at cap 4); why the fused phase costs there is not profiled.
With two points the rule is a threshold between them; an unknown bandwidth (0) gets the H100's choices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

HIGH_BANDWIDTH_GBPS = 4000.0  # between the H100's 3352 and the H200's 4814 GB/s peaks


class MemoryProperties(Protocol):  # torch.cuda.get_device_properties(...)
    memory_clock_rate: int  # kHz
    memory_bus_width: int  # bits


@dataclass(frozen=True)
class DeviceTuning:
    peak_gbps: float  # 0: unknown
    max_inflight_pages: int
    chain_inflight_pages: int
    fuse_small_w_o: bool  # fusion.py's rule may fuse (it still decides by the model's W_o per SM)


def peak_memory_gbps(props: MemoryProperties) -> float:
    """Peak DRAM bandwidth (double data rate) in GB/s; 0 when the device does not report it."""
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9


def device_tuning(peak_gbps: float) -> DeviceTuning:
    high = peak_gbps >= HIGH_BANDWIDTH_GBPS
    return DeviceTuning(peak_gbps=peak_gbps, max_inflight_pages=4 if high else 3,
                        chain_inflight_pages=2 if high else 1, fuse_small_w_o=high)
