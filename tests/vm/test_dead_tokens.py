"""A padded step's dead tokens (the last dummy sequence's tokens past its one-token context: StepArgsView.live_end)
are skipped by attention, by the tiles wholly past them and by the LM head, and the real sequences' logits stay the
reference's (VM, race detector on)."""
from __future__ import annotations

import pytest

from engine.backends.vm_backend import VMBackend
from engine.cuda.step_padding import pad_batch
from engine.instructions.ops.tile_matmul import NormOf, TileKind
from engine.instructions.registry import OPCODES, Opcode
from engine.instructions.layout import StepShape
from engine.instructions.step_args import StepArgsView, encode_step_args
from models.llama.step_batch import StepBatch
from tests.vm.helpers import random_weights, run_pair, small_config


def test_live_end_stops_at_the_context() -> None:
    batch = StepBatch.build([[1, 2, 3], [4]], [5, 0], [[0], [1]], page_size=8)
    padded = pad_batch(batch, spare_page=9, counts=(16, 4))  # two dummies: one token, then the other eleven
    args = StepArgsView.decode(encode_step_args(padded, StepShape(16, 4, 1), 8))
    assert [args.live_end(s) for s in range(4)] == [3, 4, 5, 6]  # the last dummy: its first token only


@pytest.mark.parametrize("spread", [True, False])
def test_a_hosted_tile_step_skips_its_dead_tiles_and_matches_the_reference(spread: bool) -> None:
    cfg = small_config(hidden=128, heads=4, kv_heads=2, head_dim=32, inter=192)
    skipped: list[int] = []

    def count_dead(vm: VMBackend) -> None:
        cs = vm.last_stream
        assert cs is not None
        args = StepArgsView.decode(cs.step_args)
        live = args.live_end(args.num_seqs - 1)
        tiles = [i for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL
                 and i.kind != TileKind.LM_HEAD and not (i.kind == TileKind.NORM and i.block == NormOf.FINAL)]
        skipped.append(sum(i.tok_begin >= live for i in tiles))

    # 56 tokens over 7 sequences compile the (64, 8) host; 30 over 3, then 21 over 3, run hosted in it
    prompts = [8] * 4 + [30, 31, 32]
    schedule = [[8, 8, 8, 8, 8, 8, 8], [None, None, None, None, 10, 10, 10], [1, 1, 1, None, 6, 7, 6]]
    run_pair(cfg, random_weights(cfg, seed=11), schedule, prompts, num_sms=12, pad_over=8, tile_min_tokens=3,
             tile_tokens=8, attn_spread_queries=spread, after_step=count_dead)
    assert skipped[0] == 0 and skipped[1] > 0 and skipped[2] > 0
