from __future__ import annotations

import inspect

import pytest

from engine.backends.cuda_backend import CudaBackend
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


def test_every_knob_is_a_backend_or_split_keyword() -> None:
    """The backend forwards unknown keywords to SplitParams: each knob must land on one of the two."""
    accepted = set(inspect.signature(CudaBackend.__init__).parameters) | set(inspect.signature(SplitParams).parameters)
    assert {name for name, _ in KNOBS.values()} <= accepted
