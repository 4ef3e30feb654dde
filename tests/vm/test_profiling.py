"""`engine.profiling.collect_profile` (megakernel profile --backend vm) builds a valid simulated record."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from engine.instructions.registry import Opcode
from engine.profiling import collect_profile


@pytest.mark.parametrize("policy", ["rr", "lpt", "dynamic"])
def test_collect_profile_tiny(policy: str) -> None:
    args = argparse.Namespace(preset="tiny", model=None, backend="vm", batch=2, prompt_len=20, steps=2,
                              policy=policy)
    rec = collect_profile(args)
    assert rec.simulated and rec.meta["policy"] == policy and rec.meta["batch"] == 2
    n = rec.num_instructions // 2
    assert rec.num_instructions == 2 * n and (rec.opcodes == Opcode.ARGMAX_REDUCE).sum() == 2
    assert rec.start_ns[n:].min() > rec.end_ns[:n].max()  # step 2 follows step 1
    assert np.all(rec.sm < 132) and np.all(rec.bytes_moved[rec.opcodes == Opcode.RMS_QKV_ROPE_APPEND] > 0)


def test_collect_profile_rejects_cuda() -> None:
    args = argparse.Namespace(preset="tiny", model=None, backend="cuda", batch=1, prompt_len=8, steps=1, policy=None)
    with pytest.raises(RuntimeError, match="--backend vm"):
        collect_profile(args)


def test_collect_profile_of_a_fused_batch1_step() -> None:
    """With the fusion option set, a batch-1 step profiles as QKV -> ATTN_O_PROJ -> gate/up -> down per layer
    (the VM profile builds the stream the cuda backend would build under the same options)."""
    from profiler.phases import layer_phases
    from profiler.summary import summarize

    args = argparse.Namespace(preset="tiny", model=None, backend="vm", batch=1, prompt_len=5, steps=1, policy="lpt")
    assert not (collect_profile(args).opcodes == Opcode.ATTN_O_PROJ).any()  # off by default
    rec = collect_profile(argparse.Namespace(**vars(args), kernel_option=["fuse_o_proj=1"]))
    assert (rec.opcodes == Opcode.ATTN_O_PROJ).any() and not (rec.opcodes == Opcode.O_PROJ_RESIDUAL).any()
    assert [p.name for p in layer_phases(rec)] == ["RMS_QKV_ROPE_APPEND", "ATTN_O_PROJ", "RMS_GATE_UP_SILU",
                                                   "DOWN_RESIDUAL"]
    assert "ATTN_O_PROJ" in {o.name for o in summarize(rec).opcodes}
