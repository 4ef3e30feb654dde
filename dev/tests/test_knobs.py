"""dev/knobs.py: MEGAKERNEL_* environment variables -> CudaBackend keywords, parsed like `--kernel-option`."""
from __future__ import annotations

import pytest

from dev.knobs import KNOBS, backend_knobs
from engine.cuda.backend_options import option_types
from engine.scheduler.compiler.split_params import SplitParams


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
def test_flags_accept_only_0_or_1(text: str) -> None:
    with pytest.raises(ValueError, match=f"MEGAKERNEL_FUSE_O_PROJ={text!r}: expected 0 or 1"):
        backend_knobs({"MEGAKERNEL_FUSE_O_PROJ": text})
    with pytest.raises(ValueError, match="MEGAKERNEL_ATTN_KV_RING"):
        backend_knobs({"MEGAKERNEL_ATTN_KV_RING": text})


def test_fused_head_chunks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="fused_head_chunks"):
        SplitParams(**backend_knobs({"MEGAKERNEL_FUSED_HEAD_CHUNKS": "0"}))


def test_every_knob_is_a_backend_option() -> None:
    """Each knob lands on a CudaBackend keyword (its own, a KernelOptions or a SplitParams field)."""
    assert set(KNOBS.values()) <= set(option_types())
    assert len(set(KNOBS.values())) == len(KNOBS)


@pytest.mark.parametrize("var,name", [("MEGAKERNEL_MMA_MATVEC", "mma_matvec"), ("MEGAKERNEL_PDL", "pdl"),
                                      ("MEGAKERNEL_ATTN_KV_RING", "attn_kv_ring")])
def test_kernel_flags(var: str, name: str) -> None:
    assert backend_knobs({var: "0"}) == {name: False} and backend_knobs({var: "1"}) == {name: True}
