"""Streams without EMBED (SplitParams.embed_in_stream=False: the caller writes hidden, e.g. the previous step's
ARGMAX_REDUCE in the bench's on-device loop): no EMBED instruction, layer 0 waits for nothing, and the VM (which
then writes the embedding rows itself, as the cuda backend's host path does) still matches the reference, with
the race detector on, on the split and the fused attention paths and on prefill chunks."""
from __future__ import annotations

import pytest

from engine.instructions.registry import OPCODES, Opcode
from tests.vm.helpers import compile_decode, expect_fused, random_weights, run_pair, small_config


@pytest.mark.parametrize("fused", [False, True])
def test_stream_without_embed_starts_layer_0_at_once(fused: bool) -> None:
    cfg = small_config()
    with_embed = compile_decode(cfg, "lpt", 8, batch=1, fuse_o_proj=fused)
    cs = compile_decode(cfg, "lpt", 8, batch=1, fuse_o_proj=fused, embed_in_stream=False)
    ops = [OPCODES.code_of(i) for i in cs.stream.instrs]
    assert Opcode.EMBED not in ops and Opcode.EMBED in [OPCODES.code_of(i) for i in with_embed.stream.instrs]
    qkv0 = [i for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.RMS_QKV_ROPE_APPEND and i.header.layer == 0]
    assert qkv0 and all(i.header.waits == () for i in qkv0)
    assert len(cs.stream.instrs) == len(with_embed.stream.instrs) - len(with_embed.stream.plan.embed)


@pytest.mark.parametrize("fused", [False, True])
def test_vm_without_embed_matches_reference(fused: bool) -> None:
    cfg = small_config()
    # prefill chunks, then decode steps of two sequences, then one alone (the fused path is batch-1 decode)
    schedule: list[list[int | None]] = [[None, 5], [0, None], [1, 1], [1, 1], [1, 0], [1, 0]]
    run_pair(cfg, random_weights(cfg, seed=3), schedule, [11, 9], policy="lpt", embed_in_stream=False,
             fuse_o_proj=fused, after_step=None if not fused else _fused_when_alone)


def _fused_when_alone(vm) -> None:  # noqa: ANN001
    if vm.last_stream is not None and vm.last_stream.shape.num_seqs == 1 and vm.last_stream.shape.num_tokens == 1:
        expect_fused(True)(vm)
