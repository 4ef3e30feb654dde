from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from engine.backends.cuda_backend import CudaBackend
from engine.cuda.kernel_options import KernelOptions
from engine.cuda.knobs import KNOBS, backend_knobs
from engine.scheduler.step_builder_splits import SplitParams


def test_knobs_parse_to_backend_keywords() -> None:
    env = {"MEGAKERNEL_POLICY": "rr", "MEGAKERNEL_WAVES": "1.5", "MEGAKERNEL_MAX_INFLIGHT_PAGES": "3",
           "MEGAKERNEL_L2_BEYOND_RING_OPS": "RMS_GATE_UP_SILU,LM_HEAD,", "UNRELATED": "x"}
    assert backend_knobs(env) == {"policy": "rr", "waves": 1.5, "max_inflight_pages": 3,
                                  "l2_beyond_ring_ops": ("RMS_GATE_UP_SILU", "LM_HEAD")}
    assert backend_knobs({}) == {}


def test_a_malformed_knob_names_its_variable() -> None:
    with pytest.raises(ValueError, match="MEGAKERNEL_MAX_RING_PAGES='twelve'"):
        backend_knobs({"MEGAKERNEL_MAX_RING_PAGES": "twelve"})


@pytest.mark.parametrize("text,want", [("0", False), ("1", True)])
def test_fused_o_proj_knobs(text: str, want: bool) -> None:
    got = backend_knobs({"MEGAKERNEL_FUSE_O_PROJ": text, "MEGAKERNEL_FUSED_HEAD_CHUNKS": "2"})
    assert got == {"fuse_o_proj": want, "fused_head_chunks": 2}
    assert SplitParams(**got).fuse_o_proj is want  # the backend forwards them to SplitParams


@pytest.mark.parametrize("text", ["true", "yes", "2", "", " 1"])
def test_fuse_o_proj_accepts_only_0_or_1(text: str) -> None:
    with pytest.raises(ValueError, match=f"MEGAKERNEL_FUSE_O_PROJ={text!r}: expected 0 or 1"):
        backend_knobs({"MEGAKERNEL_FUSE_O_PROJ": text})


def test_fused_head_chunks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="fused_head_chunks"):
        SplitParams(**backend_knobs({"MEGAKERNEL_FUSED_HEAD_CHUNKS": "0"}))


def test_every_knob_is_a_backend_or_split_keyword() -> None:
    """The backend forwards unknown keywords to SplitParams: each knob must land on one of the two."""
    accepted = (set(inspect.signature(CudaBackend.__init__).parameters) | set(inspect.signature(SplitParams).parameters)
                | KernelOptions.names())
    assert {name for name, _ in KNOBS.values()} <= accepted


@pytest.mark.parametrize("text,want", [("0", False), ("1", True)])
def test_attn_kv_ring_knob_is_a_backend_keyword(text: str, want: bool) -> None:
    got = backend_knobs({"MEGAKERNEL_ATTN_KV_RING": text})
    assert got == {"attn_kv_ring": want}
    assert "attn_kv_ring" in KernelOptions.names()  # a kernel option, not a SplitParams field
    with pytest.raises(ValueError, match="MEGAKERNEL_ATTN_KV_RING='on'"):
        backend_knobs({"MEGAKERNEL_ATTN_KV_RING": "on"})


def test_kernel_options_validate_and_map_to_kernel_fields() -> None:
    with pytest.raises(ValueError, match="max_inflight_pages is unresolved"):
        KernelOptions().launch_fields()  # the backend sets the device's caps first (device_tuning.py)
    with pytest.raises(ValueError, match="chain_inflight_pages is unresolved"):
        KernelOptions(max_inflight_pages=3).launch_fields()
    opts = KernelOptions(max_inflight_pages=3, chain_inflight_pages=2)
    assert opts.launch_fields()["max_inflight_pages"] == 3 and opts.launch_fields()["chain_inflight_pages"] == 2
    assert opts.launch_fields()["defer_free_pages"] == 8 and opts.launch_fields()["attn_kv_ring"] == 1
    got = KernelOptions(max_inflight_pages=4, chain_inflight_pages=1, l2_beyond_ring_kb=2, l2_beyond_ring_ops=("LM_HEAD",), low_cap_inputs=False).launch_fields()
    assert got["l2_beyond_ring_bytes"] == 2048 and got["low_cap_inputs"] == 0
    assert got["l2_beyond_ring_ops"] == 1 << 8  # OP_LM_HEAD
    assert "max_ring_pages" not in got  # a host-side option (engine/cuda/limits.py)
    for bad in ({"defer_free_pages": 9}, {"chain_inflight_pages": -1}, {"max_inflight_pages": -1}, {"chain_cap_ahead": -1}, {"l2_prefetch_kb": 5000},
                {"l2_beyond_ring_ops": ("GATE_UP",)}):
        with pytest.raises(ValueError):
            KernelOptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("text,want", [("0", False), ("1", True)])
def test_mma_matvec_knob(text: str, want: bool) -> None:
    got = backend_knobs({"MEGAKERNEL_MMA_MATVEC": text})
    assert got == {"mma_matvec": want}
    assert KernelOptions(max_inflight_pages=3, chain_inflight_pages=1, **got).launch_fields()["mma_matvec"] == int(want)
    assert KernelOptions().mma_matvec is True  # the measured default (docs/BENCHMARKS.md, ninth session)


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
