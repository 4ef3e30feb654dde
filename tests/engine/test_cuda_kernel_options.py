"""KernelOptions: the kernel's launch-time options, their checks and the Globals fields they set."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.cuda.kernel_options import KernelOptions


def test_kernel_options_validate_and_map_to_kernel_fields() -> None:
    with pytest.raises(ValueError, match="max_inflight_pages is unresolved"):
        KernelOptions().launch_fields()  # the backend sets the device's caps first (device_tuning.py)
    with pytest.raises(ValueError, match="chain_inflight_pages is unresolved"):
        KernelOptions(max_inflight_pages=3).launch_fields()
    opts = KernelOptions(max_inflight_pages=3, chain_inflight_pages=2)
    assert opts.launch_fields()["max_inflight_pages"] == 3 and opts.launch_fields()["chain_inflight_pages"] == 2
    assert opts.launch_fields()["defer_free_pages"] == 8 and opts.launch_fields()["attn_kv_ring"] == 1
    got = KernelOptions(max_inflight_pages=4, chain_inflight_pages=1, l2_beyond_ring_kb=2,
                        l2_beyond_ring_ops=("LM_HEAD",), low_cap_inputs=False).launch_fields()
    assert got["l2_beyond_ring_bytes"] == 2048 and got["low_cap_inputs"] == 0
    assert got["l2_beyond_ring_ops"] == 1 << 8  # OP_LM_HEAD
    assert "max_ring_pages" not in got  # a host-side option (engine/cuda/limits.py)
    for bad in ({"defer_free_pages": 9}, {"chain_inflight_pages": -1}, {"max_inflight_pages": -1},
                {"chain_cap_ahead": -1}, {"l2_prefetch_kb": 5000}, {"l2_beyond_ring_ops": ("GATE_UP",)},
                {"attn_kv_buffers": 3}):
        with pytest.raises(ValueError):
            KernelOptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("on", [False, True])
def test_mma_matvec_reaches_the_kernel(on: bool) -> None:
    assert KernelOptions(max_inflight_pages=3, chain_inflight_pages=1, mma_matvec=on).launch_fields()["mma_matvec"] \
        == int(on)
    assert KernelOptions().mma_matvec is True  # the measured default


def test_launch_fields_are_scalars_the_kernel_reads() -> None:
    """Every field the options set is one the launcher copies into Globals (csrc/interpreter/interpreter.cu
    reads each with MK_INT, and the launch itself reads `pdl`); a name on one side only would fail at launch, on a
    GPU machine only."""
    src = (Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "interpreter.cu").read_text()
    kernel_ints = set(re.findall(r"MK_INT\((\w+)\)", src))
    assert kernel_ints, "no MK_INT fields found in interpreter.cu"
    launch_reads = set(re.findall(r'fields\["(\w+)"\]', src))
    assert launch_reads == {"pdl"}
    assert set(KernelOptions(max_inflight_pages=3, chain_inflight_pages=1).launch_fields()) <= kernel_ints | launch_reads


def test_the_tile_staging_options_reach_the_kernel() -> None:
    """tile_small_x and attn_kv_buffers (csrc/interpreter/tile_streams.cuh, attention_tiles.cuh): on and four by
    default, each an A/B knob of its own."""
    on = KernelOptions(max_inflight_pages=3, chain_inflight_pages=1).launch_fields()
    assert on["tile_small_x"] == 1 and on["attn_kv_buffers"] == 4
    off = KernelOptions(max_inflight_pages=3, chain_inflight_pages=1, tile_small_x=False, attn_kv_buffers=2)
    assert off.launch_fields()["tile_small_x"] == 0 and off.launch_fields()["attn_kv_buffers"] == 2


def test_packed_tile_pages_are_a_knob_of_their_own() -> None:
    """tile_pack_k (csrc/interpreter/tile_streams.cuh tile_pack): a launch field, set by its option alone."""
    base = dict(max_inflight_pages=3, chain_inflight_pages=1)
    assert KernelOptions(**base).launch_fields()["tile_pack_k"] == int(KernelOptions.tile_pack_k)
    assert KernelOptions(**base, tile_pack_k=True).launch_fields()["tile_pack_k"] == 1
    assert KernelOptions(**base, tile_pack_k=False).launch_fields()["tile_pack_k"] == 0


def test_attention_head_units_are_a_knob_of_their_own() -> None:
    """attn_head_units (csrc/interpreter/attention_ring.cuh): a launch field, on by default, set by its option alone."""
    base = dict(max_inflight_pages=3, chain_inflight_pages=1)
    assert KernelOptions(**base).launch_fields()["attn_head_units"] == 1
    assert KernelOptions(**base, attn_head_units=False).launch_fields()["attn_head_units"] == 0
