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


def test_a_chunk_profile_with_decodes_records_one_mixed_step_then_decodes() -> None:
    """--decode-lens: sequences decoding one token in the prompt chunk's step (a serving step's mix), then every
    sequence decodes."""
    from engine.profiling import first_step_lasts, last_tokens_batch_of

    args = argparse.Namespace(preset="tiny", model=None, backend="vm", batch=1, prompt_len=20, prompt_lens=(24, 16),
                              chunk=8, decode_lens=(30, 12, 12), steps=2, policy="lpt")
    contexts, lasts = first_step_lasts(args, [24, 16])
    assert contexts == [24, 16, 30, 12, 12] and lasts == [8, 8, 1, 1, 1]
    mixed = last_tokens_batch_of(contexts, lasts, 16)
    assert mixed.num_seqs == 5 and mixed.num_tokens == 19
    assert mixed.positions.tolist()[:8] == list(range(16, 24)) and mixed.positions.tolist()[-3:] == [29, 11, 11]
    rec = collect_profile(args)
    assert rec.meta["batch"] == 5 and rec.meta["decode_lens"] == "30,12,12" and rec.meta["chunk"] == 8
    assert (rec.opcodes == Opcode.ARGMAX_REDUCE).sum() == 2  # the mixed step, then a decode step


def test_decode_lens_without_a_chunk_is_refused() -> None:
    args = argparse.Namespace(preset="tiny", model=None, backend="vm", batch=2, prompt_len=20, chunk=None,
                              decode_lens=(30,), steps=1, policy="lpt")
    with pytest.raises(ValueError, match="--decode-lens .* --chunk"):
        collect_profile(args)
