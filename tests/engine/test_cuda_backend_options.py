"""`--kernel-option NAME=VALUE` (engine/cuda/backend_options.py): names checked against CudaBackend's keywords,
values parsed by their field's type, ranges checked before any model is loaded; each error names the option."""
from __future__ import annotations

import argparse
import inspect

import pytest

from engine.backends.cuda_backend import CudaBackend
from engine.cuda.backend_options import BACKEND_KEYWORDS, BACKEND_SET_FIELDS, option_types, parse_kernel_options
from engine.cuda.kernel_option_flag import add_kernel_option_argument
from engine.cuda.kernel_options import KernelOptions
from engine.scheduler.compiler.split_params import SplitParams


def test_values_parse_by_type() -> None:
    got = parse_kernel_options(["policy=rr", "waves=1.5", "max_inflight_pages=3", "fuse_o_proj=1",
                                "l2_beyond_ring_ops=RMS_GATE_UP_SILU,LM_HEAD,", "max_ring_pages=none",
                                "mlp_slices=4", "pdl=0"])
    assert got == {"policy": "rr", "waves": 1.5, "max_inflight_pages": 3, "fuse_o_proj": True,
                   "l2_beyond_ring_ops": ("RMS_GATE_UP_SILU", "LM_HEAD"), "max_ring_pages": None, "mlp_slices": 4,
                   "pdl": False}
    assert parse_kernel_options([]) == {}
    assert parse_kernel_options(["waves=2", "waves=3"]) == {"waves": 3.0}  # the last one wins


@pytest.mark.parametrize("item,message", [
    ("no_such_option=1", "--kernel-option 'no_such_option=1': unknown option 'no_such_option'"),
    ("max_ring_pages", "--kernel-option 'max_ring_pages': expected NAME=VALUE"),
    ("=3", "expected NAME=VALUE"),
    ("max_ring_pages=twelve", "--kernel-option max_ring_pages='twelve': expected an integer"),
    ("waves=fast", "--kernel-option waves='fast': expected a number"),
    ("fuse_o_proj=true", "--kernel-option fuse_o_proj='true': expected 0 or 1"),
    ("defer_free_pages=9", "defer_free_pages must be in"),
    ("fused_head_chunks=0", "fused_head_chunks"),
    ("l2_beyond_ring_ops=GATE_UP", "GATE_UP"),
    ("policy=fastest", "policy: unknown 'fastest'"),
])
def test_errors_name_the_option(item: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_kernel_options([item])


def test_names_are_the_backends_keywords() -> None:
    """Every option is a keyword CudaBackend takes: its own, a KernelOptions field or a SplitParams field (the
    backend forwards the rest of its keywords to SplitParams)."""
    # tp_world, tp_rank: set by the tensor-parallel backend for its ranks (engine/backends/cuda_tensor_parallel.py),
    # not options; so is the SplitParams field that follows from the rank (BACKEND_SET_FIELDS)
    own = set(inspect.signature(CudaBackend.__init__).parameters) - {"self", "weights", "num_pages", "page_size",
                                                                     "kernel", "split_kw", "tp_world", "tp_rank"}
    assert set(BACKEND_KEYWORDS) == own
    split = {name for name in inspect.signature(SplitParams).parameters} - set(BACKEND_SET_FIELDS)
    assert set(option_types()) == own | KernelOptions.names() | split


def test_the_flag_is_repeatable() -> None:
    parser = argparse.ArgumentParser()
    add_kernel_option_argument(parser)
    args = parser.parse_args(["--kernel-option", "pdl=0", "--kernel-option", "waves=2"])
    assert parse_kernel_options(args.kernel_option) == {"pdl": False, "waves": 2.0}
    assert parser.parse_args([]).kernel_option == []


def test_engine_config_takes_kernel_options_and_refuses_a_typo_before_loading() -> None:
    from engine.cli.engine_flags import add_engine_flags
    from engine.engine_config import EngineConfig

    assert EngineConfig(model="m", kernel_options=("per_seq_splits=1", "attn_tiles=0")).kernel_options
    with pytest.raises(ValueError, match="per_seq_split"):
        EngineConfig(model="m", kernel_options=("per_seq_split=1",))
    p = argparse.ArgumentParser()
    add_engine_flags(p)
    args = p.parse_args(["--model", "m", "--kernel-option", "waves=2", "--kernel-option", "pdl=0"])
    assert args.kernel_option == ["waves=2", "pdl=0"]


def test_the_cpu_backends_ignore_kernel_options(tiny_checkpoint: str) -> None:
    from engine import LLM, SamplingParams

    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, kernel_options=("pdl=0",))
    out = llm.generate("Hello", SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 2
