"""ATTN_O_PROJ (batch-1 attention fused with the O-projection) on the VM: equal to the reference model in
float32 for decode and chunked prefill, race-free (interleavings and policies: test_interleavings.py)."""
from __future__ import annotations

import pytest

from engine.instructions.ops.attn_o_proj import AttnOProj
from engine.instructions.ops.rms_qkv_rope_append import RmsQkvRopeAppend
from engine.instructions.registry import OPCODES
from tests.vm.helpers import expect_fused, random_weights, run_pair, small_config

# (heads, kv_heads, head_dim, hidden, inter, tied)
CONFIGS = [
    (8, 2, 64, 96, 160, False),   # GQA 4, head_dim 64: one head range of 256 columns per group
    (8, 2, 128, 64, 96, True),    # GQA 4, head_dim 128: two head ranges per group
    (4, 4, 32, 64, 128, True),    # MHA (GQA 1)
]
IDS = ["gqa4-hd64", "gqa4-hd128", "mha-hd32"]
DECODE = [[None]] + [[1]] * 3  # whole prompt, then three decode steps
PREFILL_CHUNKS = [[5], [6], [None], [1]]  # chunks that start at pos > 0, across page boundaries


def _config(heads: int, kv: int, hd: int, hidden: int, inter: int, tied: bool):  # noqa: ANN202
    return small_config(hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, inter=inter, tied=tied)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "split"])
@pytest.mark.parametrize("schedule", [DECODE, PREFILL_CHUNKS], ids=["decode", "prefill-chunks"])
@pytest.mark.parametrize("heads,kv,hd,hidden,inter,tied", CONFIGS, ids=IDS)
def test_batch1_matches_reference(heads: int, kv: int, hd: int, hidden: int, inter: int, tied: bool,
                                  schedule: list, fused: bool) -> None:
    cfg = _config(heads, kv, hd, hidden, inter, tied)
    w = random_weights(cfg, seed=100 + heads * hd + kv)
    # One KV split (as the cuda backend picks for short contexts) makes batch-1 steps fusable.
    run_pair(cfg, w, schedule, prompt_lens=[17], num_sms=16, max_attn_splits=1, fuse_o_proj=fused,
             after_step=expect_fused(fused))


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_every_head_chunking_matches_reference(chunks: int) -> None:
    cfg = _config(*CONFIGS[0])
    w = random_weights(cfg, seed=40 + chunks)
    run_pair(cfg, w, DECODE, prompt_lens=[11], num_sms=24, max_attn_splits=1, fuse_o_proj=True, fused_head_chunks=chunks,
             after_step=expect_fused(True))


def test_odd_hidden_copies_single_columns() -> None:
    """hidden % 4 != 0: the QKV blocks copy hidden into mid in single-column units."""
    cfg = small_config(hidden=42, heads=2, kv_heads=1, head_dim=20, inter=52, vocab=99)
    w = random_weights(cfg, seed=12)
    run_pair(cfg, w, PREFILL_CHUNKS, prompt_lens=[15], num_sms=64, page_size=4, max_attn_splits=1, fuse_o_proj=True,
             after_step=expect_fused(True))


def test_declared_regions_are_the_attention_reads_plus_two_accumulations() -> None:
    """What the race detector is told: its attention's reads exactly as the equal unsplit ATTN_PARTIAL
    declares them, then "acc" on mid and hidden over its tokens x rows (no attn_out)."""
    accesses = OPCODES.accesses
    cfg = _config(*CONFIGS[1])
    vm = run_pair(cfg, random_weights(cfg, seed=2), [[7]], prompt_lens=[9], num_sms=16, max_attn_splits=1, fuse_o_proj=True,
                  fused_head_chunks=2)
    bufs, _ = vm.last_stream.backend_state
    layer1 = [i for i in vm.last_stream.stream.instrs if i.header.layer == 1]
    for ins in (i for i in layer1 if isinstance(i, RmsQkvRopeAppend)):  # its copy: a plain write of mid
        copy = [(((0, 7),), ((ins.copy_begin, ins.copy_end),))] if ins.copy_end > ins.copy_begin else []
        assert [(a.kind, b) for a in accesses(ins, bufs) if a.buffer == "mid" for b in a.boxes] == \
            [("w", b) for b in copy]
    fused = [i for i in layer1 if isinstance(i, AttnOProj)]
    assert {(i.head_begin, i.head_end) for i in fused} == {(0, 2), (2, 4)}
    for ins in fused:
        got = accesses(ins, bufs)
        reads = [a for a in accesses(ins.attention(), bufs) if a.kind == "r"]
        rows = (((0, 7),), ((ins.row_begin, ins.row_end),))
        assert [a for a in got if a.kind == "r"] == reads and {a.buffer for a in reads} == {"q", "k_cache", "v_cache"}
        assert [(a.buffer, a.kind, a.boxes) for a in got if a.kind != "r"] == [
            ("mid", "acc", (rows,)), ("hidden", "acc", (rows,))]
