"""Spread attention (engine/instructions/query_units.py): the step args deal a stream's query units out over its
sequences by their attention work, and the VM, race detector on, matches the reference model with mixed steps
(prompt chunks beside decodes) whose attention runs as units, with and without tiles."""
from __future__ import annotations

import pytest

from engine.backends.vm_backend import VMBackend
from engine.instructions.query_units import resolve, unit_of, unit_starts
from engine.instructions.ops.attn_partial import AttnPartial
from engine.instructions.registry import OPCODES, Opcode
from tests.vm.helpers import random_weights, run_pair, small_config


def test_one_unit_per_decode_and_the_rest_to_the_prompt_chunk() -> None:
    # a 128-token prompt chunk (context 128) beside three decodes (contexts 200): 40 units
    starts = unit_starts([0, 1, 129, 130, 131], [200, 128, 200, 200], 40)
    assert starts == [0, 1, 33, 34, 35]  # 1 + 36 units for the chunk, capped at 128 // 4 = 32
    assert unit_of(starts, 0) == (0, 0, 1) and unit_of(starts, 1) == (1, 0, 32) and unit_of(starts, 32) == (1, 31, 32)
    assert unit_of(starts, 34) == (3, 0, 1) and unit_of(starts, 35) is None and unit_of(starts, 39) is None


def test_units_follow_the_work_and_the_identity_without_extra_units() -> None:
    assert unit_starts([0, 1, 2, 3], [5, 6, 7], 3) == [0, 1, 2, 3]
    assert unit_starts([0, 64, 128], [64, 640], 20) == [0, 2, 18]  # the longer context takes the units
    assert unit_starts([0, 9, 10], [9, 4], 2) == [0, 1, 2]  # every sequence one unit at least
    assert unit_starts([0, 9, 10], [9, 4], 50) == [0, 2, 3]  # at most one per 4 tokens


def test_resolve_names_the_unit_and_leaves_plain_tasks() -> None:
    starts = [0, 1, 5, 6]
    spread = AttnPartial(seq=0, kv_group=1, split=0, num_splits=1, head_begin=0, head_end=2, q_part=3, q_parts=8,
                         spread=1)
    assert resolve(spread, starts) == AttnPartial(seq=1, kv_group=1, split=0, num_splits=1, head_begin=0,
                                                  head_end=2, q_part=2, q_parts=4)
    assert resolve(AttnPartial(**{**spread.__dict__, "q_part": 6}), starts) is None
    plain = AttnPartial(seq=2, kv_group=0, split=0, num_splits=1, head_begin=0, head_end=2, q_part=1, q_parts=2)
    assert resolve(plain, starts) is plain


def expect_spread(spread: bool):
    def check(vm: VMBackend) -> None:
        cs = vm.last_stream
        assert cs is not None
        shape = cs.shape
        mixed = 1 < shape.num_seqs < shape.num_tokens
        attn = [i for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.ATTN_PARTIAL]
        assert cs.stream.plan.spread == (spread and mixed)
        assert all(i.spread == int(spread and mixed) for i in attn)
    return check


@pytest.mark.parametrize("tiles", [False, True])
@pytest.mark.parametrize("spread", [True, False])
def test_mixed_steps_with_spread_attention_match_the_reference(tiles: bool, spread: bool) -> None:
    cfg = small_config(hidden=128, heads=4, kv_heads=2, head_dim=32, inter=192)
    w = random_weights(cfg, seed=5)
    extra: dict[str, object] = {"tile_min_tokens": 3, "tile_tokens": 8} if tiles else {}
    # prompts of 23 and 9 tokens beside decodes, a second chunk of the first prompt with the others decoding
    run_pair(cfg, w, [[None, 4, None], [1, None, 1], [1, 1, 1], [12, 1, 1]], prompt_lens=[23, 9, 30], num_sms=12,
             min_pages_per_split=64, attn_spread_queries=spread, after_step=expect_spread(spread), **extra)
