"""The cuda backend's bandwidth-dependent defaults (engine/cuda/device_tuning.py), from device properties as
torch reports them (the H100's and H200's values as measured on the GPU machines)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from engine.cuda.device_tuning import HIGH_BANDWIDTH_GBPS, device_tuning, peak_memory_gbps


@dataclass
class Props:
    memory_clock_rate: int  # kHz
    memory_bus_width: int  # bits


def test_peak_bandwidth_of_an_h100() -> None:
    assert peak_memory_gbps(Props(2_619_000, 5120)) == pytest.approx(3352.3, abs=0.1)  # H100 80GB HBM3


def test_h100_keeps_cap_3_and_the_split_path() -> None:
    t = device_tuning(peak_memory_gbps(Props(2_619_000, 5120)))
    assert (t.max_inflight_pages, t.chain_inflight_pages, t.fuse_small_w_o) == (3, 1, False)


def test_h200_class_bandwidth_gets_cap_4_and_fusion() -> None:
    t = device_tuning(peak_memory_gbps(Props(3_201_000, 6016)))  # what an H200 reports: 4814 GB/s
    assert t.peak_gbps == pytest.approx(4814.3, abs=0.1) and t.peak_gbps > HIGH_BANDWIDTH_GBPS
    assert (t.max_inflight_pages, t.chain_inflight_pages, t.fuse_small_w_o) == (4, 2, True)


def test_unknown_bandwidth_gets_the_conservative_choices() -> None:
    class NoMemoryInfo:  # a device (or torch build) that does not report them
        pass

    assert peak_memory_gbps(NoMemoryInfo()) == 0.0  # type: ignore[arg-type]
    t = device_tuning(0.0)
    assert (t.max_inflight_pages, t.chain_inflight_pages, t.fuse_small_w_o) == (3, 1, False)
