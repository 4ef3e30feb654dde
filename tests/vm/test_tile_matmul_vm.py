"""Steps whose linear layers run as TILE_MATMUL tiles: the VM matches the reference model (logits within 1e-5, same
greedy tokens) with the race detector on, over prompt chunks and decodes, several token chunks per tile."""
from __future__ import annotations

import pytest

from engine.instructions.registry import OPCODES, Opcode
from engine.backends.vm_backend import VMBackend
from engine.instructions.ops.tile_matmul import TileKind
from tests.vm.helpers import random_weights, run_pair, small_config

# (heads, kv_heads, head_dim, hidden, inter): K widths in whole 64-column steps, gate/up pairs within a tile
CONFIGS = [
    (4, 2, 32, 128, 192),   # GQA 2
    (8, 2, 16, 64, 128),    # GQA 4, group rows 96
    (2, 1, 64, 128, 256),   # MQA, head_dim 64
]


def expect_tiles(tiles: bool):
    def check(vm: VMBackend) -> None:
        cs = vm.last_stream
        assert cs is not None and (cs.stream.plan.tiles is not None) == tiles
        ops = {OPCODES.code_of(i) for i in cs.stream.instrs}
        assert (Opcode.TILE_MATMUL in ops) == tiles
        if tiles:
            assert not ops & {Opcode.RMS_QKV_ROPE_APPEND, Opcode.O_PROJ_RESIDUAL, Opcode.RMS_GATE_UP_SILU,
                              Opcode.DOWN_RESIDUAL}
            # the LM head as tiles too, of each sequence's last token, prompt chunks or not
            assert Opcode.LM_HEAD not in ops
            kinds = {i.kind for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL}
            assert TileKind.LM_HEAD in kinds
    return check


@pytest.mark.parametrize("heads,kv,hd,hidden,inter", CONFIGS)
@pytest.mark.parametrize("tile_tokens", [8, 64])
def test_tile_steps_match_reference(heads: int, kv: int, hd: int, hidden: int, inter: int, tile_tokens: int) -> None:
    cfg = small_config(hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, inter=inter)
    w = random_weights(cfg, seed=heads + hidden)
    run_pair(cfg, w, [[None, None, None], [5, 1, 1], [1, 1, 1], [1, 1, 1]], prompt_lens=[11, 17, 3], num_sms=12,
             tile_min_tokens=3, tile_tokens=tile_tokens, after_step=expect_tiles(True))


def test_tiles_listed_weight_major_match_reference() -> None:
    """The other tile order (tile_weight_major: a weight block over every chunk together) computes the same."""
    heads, kv, hd, hidden, inter = CONFIGS[0]
    cfg = small_config(hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, inter=inter)
    w = random_weights(cfg, seed=5)
    run_pair(cfg, w, [[None, None, None], [5, 1, 1]], prompt_lens=[11, 17, 3], num_sms=12, tile_min_tokens=3,
             tile_tokens=8, tile_weight_major=True, after_step=expect_tiles(True))


def test_steps_below_the_threshold_keep_the_matvec_opcodes() -> None:
    cfg = small_config(hidden=128, inter=192)
    w = random_weights(cfg, seed=2)
    run_pair(cfg, w, [[None], [1], [1]], prompt_lens=[9], num_sms=8, tile_min_tokens=4, after_step=None)
    run_pair(cfg, w, [[1, 1]], prompt_lens=[1, 1], num_sms=8, tile_min_tokens=4, after_step=expect_tiles(False))


def test_more_query_parts_and_short_norm_tiles_match_reference() -> None:
    """A prompt chunk's attention in more query parts (attn_query_waves) and NORM tiles of few tokens
    (norm_max_tokens) compute the same, the race detector on."""
    heads, kv, hd, hidden, inter = CONFIGS[0]
    cfg = small_config(hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, inter=inter)
    w = random_weights(cfg, seed=9)

    def cuts(vm: VMBackend) -> None:
        expect_tiles(True)(vm)
        cs = vm.last_stream
        assert cs is not None and cs.stream.plan.tiles is not None
        assert max(b - a for a, b in cs.stream.plan.tiles.norm_tokens) <= 2
        assert cs.stream.plan.q_parts > 1
    run_pair(cfg, w, [[None, None]], prompt_lens=[30, 13], num_sms=6, tile_min_tokens=3, tile_tokens=8,
             attn_query_waves=3.0, norm_max_tokens=2, after_step=cuts)


def test_tall_tiles_match_reference() -> None:
    """tile_wide_rows=256: a prompt chunk's (100 tokens: one wide chunk) linear layers in tiles of up to 256 rows, the
    decodes after it (narrow chunks) at 128; the same results, the race detector on."""
    cfg = small_config(hidden=256, heads=4, kv_heads=2, head_dim=64, inter=256)
    w = random_weights(cfg, seed=11)

    def tall(vm: VMBackend) -> None:
        cs = vm.last_stream
        assert cs is not None
        rows = [i.row_end - i.row_begin for i in cs.stream.instrs
                if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind not in (TileKind.NORM, TileKind.LM_HEAD)]
        assert rows and (max(rows) > 128) == (cs.shape.num_tokens > 64) and max(rows) <= 256

    run_pair(cfg, w, [[None, None], [1, 1]], prompt_lens=[70, 30], num_sms=12, tile_min_tokens=2, tile_tokens=128,
             tile_wide_rows=256, after_step=tall)
