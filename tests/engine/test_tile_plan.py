"""How a step of many tokens is cut into TILE_MATMUL tiles (engine/scheduler/compiler/step_builder_tiles.py) and what
the host's fit check says of them (engine/cuda/limits.py), against the kernel's constants (csrc/interpreter/
tile_streams.cuh, parsed here)."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engine.cuda.limits import UnsupportedOnGPU
from engine.instructions.layout import ModelDims
from engine.instructions.ops.tile_matmul import NormOf, TileKind, TileMatmul
from engine.instructions.registry import OPCODES, Opcode
from engine.profiling import chunk_batch_of, decode_batch
from engine.scheduler.compiler import step_builder_tiles as tiles
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch
from tests.engine.test_interpreter_limits import _limits

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "tile_streams.cuh"
H100 = TargetDevice(num_sms=132)


def _compile(batch: StepBatch, preset: str = "llama-3.2-1b"):  # noqa: ANN202
    d = ModelDims.from_config(preset_config(preset))
    return d, compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8, tile_min_tokens=17), H100)


def test_the_kernels_tile_sizes_are_the_builders() -> None:
    c = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", HEADER.read_text())}
    assert (c["TILE_WEIGHT_ROWS"], c["TILE_K"], c["TILE_TOKENS"], c["TILE_WIDE_TOKENS"],
            4 * 256 * c["TILE_NORM_VECS"]) == (tiles.TILE_MAX_ROWS, tiles.TILE_K_STEP, tiles.TILE_NARROW_TOKENS,
                                               tiles.TILE_MAX_TOKENS, tiles.TILE_NORM_MAX_HIDDEN)
    assert "TILE_TALL_ROWS = 2 * TILE_WEIGHT_ROWS;" in HEADER.read_text() and tiles.TILE_TALL_ROWS == 2 * tiles.TILE_MAX_ROWS


def test_a_1b_decode_of_64_is_one_wave_of_tiles_per_op_with_four_x_stages() -> None:
    d, cs = _compile(decode_batch(64, 33, 16))
    kinds = Counter(TileKind(i.kind) for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL)
    norms = kinds.pop(TileKind.NORM)
    per_layer = {k: n // (d.layers if k != TileKind.LM_HEAD else 1) for k, n in kinds.items()}
    assert per_layer == {TileKind.QKV: 96, TileKind.O: 128, TileKind.GATE_UP: 132, TileKind.DOWN: 128,
                         TileKind.LM_HEAD: 1002}
    assert norms == (2 * d.layers + 1) * 33  # each norm: 33 ranges of 1-2 tokens (a quarter of the SMs)
    ops = {OPCODES.code_of(i) for i in cs.stream.instrs}
    assert not ops & {Opcode.RMS_QKV_ROPE_APPEND, Opcode.O_PROJ_RESIDUAL, Opcode.RMS_GATE_UP_SILU,
                      Opcode.DOWN_RESIDUAL, Opcode.LM_HEAD}
    lim = _limits()
    ring = lim.fit_stream(cs.words, 64, 64, d)  # the ring grows while x holds GATE_UP's staged products
    assert ring > lim.min_ring_pages and lim.x_floats_at(ring) * 4 // (64 * 128) >= 4


def test_a_prompt_chunk_runs_in_token_chunks_and_its_lm_head_over_its_one_sequence() -> None:
    """300 tokens: three wide chunks of 100 for every kind, O's too (a page visit multiplies 100 tokens); the LM head
    as tiles of the one sequence, after one final-norm tile of its last token."""
    d, cs = _compile(StepBatch.build([list(range(1, 301))], [0], [list(range(19))], page_size=16))
    chunks: dict[TileKind, set[tuple[int, int]]] = {}
    for i in cs.stream.instrs:
        if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind not in (TileKind.NORM, TileKind.LM_HEAD):
            chunks.setdefault(TileKind(i.kind), set()).add((i.tok_begin, i.tok_end))
    assert set(chunks) == {TileKind.QKV, TileKind.O, TileKind.GATE_UP, TileKind.DOWN}
    assert all(c == {(0, 100), (100, 200), (200, 300)} for c in chunks.values())
    assert not any(OPCODES.code_of(i) == Opcode.LM_HEAD for i in cs.stream.instrs)
    tiles = [i for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL]
    assert {(i.tok_begin, i.tok_end) for i in tiles if i.kind == TileKind.LM_HEAD} == {(0, 1)}
    assert [(i.tok_begin, i.tok_end) for i in tiles if i.kind == TileKind.NORM and i.block == NormOf.FINAL] == [(0, 1)]
    lim = _limits()
    assert lim.fit_stream(cs.words, 300, 1, d) >= lim.min_ring_pages  # wide tiles' stages and products fit x


def test_the_lm_head_of_a_step_with_prompt_chunks_as_the_matvec_opcode_for_the_ab() -> None:
    """SplitParams.tile_lm_head_mixed=False: a prompt chunk beside a decode keeps LM_HEAD (and no final-norm tiles);
    a decode step keeps its LM head tiles."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    params = BuildParams.of("lpt", min_pages_per_split=8, tile_min_tokens=17, tile_lm_head_mixed=False)
    mixed = StepBatch.build([list(range(1, 41)), [7]], [0, 30], [list(range(3)), list(range(2))], page_size=16)
    ops = {OPCODES.code_of(i) for i in compile_stream(d, mixed, 16, params, H100).stream.instrs}
    assert Opcode.LM_HEAD in ops
    decode = StepBatch.build([[t] for t in range(1, 41)], [9] * 40, [[j] for j in range(40)], page_size=16)
    instrs = compile_stream(d, decode, 16, params, H100).stream.instrs
    assert Opcode.LM_HEAD not in {OPCODES.code_of(i) for i in instrs}
    assert any(OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind == TileKind.LM_HEAD for i in instrs)


def test_tile_tokens_64_keeps_every_tile_narrow() -> None:
    """SplitParams.tile_tokens=64 (`--kernel-option tile_tokens=64`): chunks of at most 64 tokens, as before wide
    tiles, for the A/B."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    batch = StepBatch.build([list(range(1, 101))], [0], [list(range(7))], page_size=16)
    params = BuildParams.of("lpt", min_pages_per_split=8, tile_min_tokens=17, tile_tokens=64)
    cs = compile_stream(d, batch, 16, params, H100)
    assert {(i.tok_begin, i.tok_end) for i in cs.stream.instrs
            if OPCODES.code_of(i) == Opcode.TILE_MATMUL
            and i.kind not in (TileKind.NORM, TileKind.LM_HEAD)} == {(0, 50), (50, 100)}


def test_a_decode_of_100_sequences_is_one_wide_chunk() -> None:
    d, cs = _compile(decode_batch(100, 33, 16))
    tiles_ = [i for i in cs.stream.instrs if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind != TileKind.NORM]
    assert {(i.tok_begin, i.tok_end) for i in tiles_} == {(0, 100)}
    assert any(i.kind == TileKind.LM_HEAD for i in tiles_)
    lim = _limits()
    assert lim.fit_stream(cs.words, 100, 100, d) >= lim.min_ring_pages


@pytest.mark.parametrize("weight_major", [True, False])
def test_tiles_of_one_weight_block_are_listed_together_over_the_chunks(weight_major: bool) -> None:
    """tile_weight_major: each op lists a weight block's tiles over every token chunk together (the list schedule
    then hands them to SMs at once, sharing the block through L2); off (the default), chunk by chunk. Same tiles
    either way."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    batch = StepBatch.build([list(range(1, 201))], [0], [list(range(13))], page_size=16)
    params = BuildParams.of("lpt", min_pages_per_split=8, tile_min_tokens=17, tile_weight_major=weight_major)
    cs = compile_stream(d, batch, 16, params, H100)
    gate_up = [(i.row_begin, i.tok_begin) for i in cs.stream.instrs
               if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind == TileKind.GATE_UP and i.header.layer == 0]
    chunks = sorted({t for _, t in gate_up})
    assert len(chunks) == 2  # 200 tokens: two wide chunks
    firsts = gate_up[:len(chunks)]
    if weight_major:
        assert firsts == [(gate_up[0][0], t) for t in chunks]
    else:
        assert {t for _, t in firsts} == {0}
    _, default = _compile(batch)
    assert sorted(gate_up) == sorted((i.row_begin, i.tok_begin) for i in default.stream.instrs
                                     if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind == TileKind.GATE_UP
                                     and i.header.layer == 0)


def test_steps_below_the_threshold_have_no_tiles() -> None:
    _, cs = _compile(decode_batch(16, 33, 16))
    assert cs.stream.plan.tiles is None


@pytest.mark.parametrize("kind,rows,k,tokens", [(TileKind.O, 144, 64, 8), (TileKind.O, 24, 64, 8),
                                                (TileKind.O, 32, 96, 8), (TileKind.O, 32, 64, 129),
                                                (TileKind.QKV, 32, 64, 129), (TileKind.DOWN, 256, 64, 64),
                                                (TileKind.LM_HEAD, 256, 64, 100), (TileKind.GATE_UP, 272, 64, 100)])
def test_the_fit_check_refuses_tiles_the_kernel_cannot_run(kind: TileKind, rows: int, k: int, tokens: int) -> None:
    """Rows in 16s up to 128 (256 in a wide tile of a linear layer), whole 64-column K steps, up to 128 tokens (wide)."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    words = OPCODES.encode_many([TileMatmul(kind, 0, rows, 0, k, 0, tokens)])
    with pytest.raises(UnsupportedOnGPU, match="TILE_MATMUL"):
        _limits().fit_stream(np.asarray(words), tokens, tokens, d)


@pytest.mark.parametrize("preset", ["smollm2-135m", "llama-3.2-3b", "llama-3.1-8b"])
def test_other_shapes_tile_and_fit(preset: str) -> None:
    """Every tile of a 32-sequence decode and a 100-token prompt of these widths (576, 3072, 4096) is one the kernel
    runs, and the ring keeps x room for its stages."""
    lim = _limits()
    for batch in (decode_batch(32, 33, 16), StepBatch.build([list(range(1, 101))], [0], [list(range(7))], page_size=16)):
        d, cs = _compile(batch, preset)
        assert cs.stream.plan.tiles is not None
        assert lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d) >= lim.min_ring_pages


def test_a_long_prompt_chunk_has_norm_tiles_of_at_most_16_tokens_and_two_attention_waves() -> None:
    """2 048 tokens: 128 NORM tiles per norm (33 of 62 tokens each kept every QKV tile waiting ~65 us), and 33 query
    parts per KV group (264 attention instructions, about two per SM), the later parts costed higher (causal)."""
    d, cs = _compile(StepBatch.build([list(range(1, 2049))], [0], [list(range(128))], page_size=16))
    norms = [(i.tok_begin, i.tok_end) for i in cs.stream.instrs
             if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind == TileKind.NORM and i.header.layer == 0]
    assert len(norms) == 2 * 128 and max(b - a for a, b in norms) == 16
    attn = [(i, cs.costs[k]) for k, i in enumerate(cs.stream.instrs)
            if OPCODES.code_of(i) == Opcode.ATTN_PARTIAL and i.header.layer == 0 and i.kv_group == 0]
    assert len(attn) == 33 and {i.q_parts for i, _ in attn} == {33}
    flops = [c.flops for _, c in sorted(attn, key=lambda ic: ic[0].q_part)]
    assert flops == sorted(flops) and flops[-1] > 30 * flops[0]  # the last part attends to ~all 2 048 keys
    # a decode step keeps 33 NORM tiles of 1-2 tokens and one query part
    _, dec = _compile(decode_batch(64, 33, 16))
    assert {i.q_parts for i in dec.stream.instrs if OPCODES.code_of(i) == Opcode.ATTN_PARTIAL} == {1}


@pytest.mark.parametrize("preset", ["llama-3.2-1b", "llama-3.1-8b"])
def test_tile_wide_rows_256_makes_tall_tiles_of_wide_chunks_only(preset: str) -> None:
    """SplitParams.tile_wide_rows=256: a 2 048-token prompt chunk's QKV, O, gate/up and down tiles take up to 256 rows
    (the 1B's gate/up and O / down rows exactly 256), and each fits the kernel; a 32-sequence decode (one narrow chunk)
    keeps tiles of at most 128."""
    d = ModelDims.from_config(preset_config(preset))
    params = BuildParams.of("lpt", min_pages_per_split=8, tile_min_tokens=17, tile_wide_rows=256)
    lim = _limits()
    for batch, tall in ((chunk_batch_of([2048], 2048, 16), True), (decode_batch(32, 33, 16), False)):
        cs = compile_stream(d, batch, 16, params, H100)
        rows: dict[TileKind, set[int]] = {}
        for i in cs.stream.instrs:
            if OPCODES.code_of(i) == Opcode.TILE_MATMUL and i.kind not in (TileKind.NORM, TileKind.LM_HEAD):
                rows.setdefault(TileKind(i.kind), set()).add(i.row_end - i.row_begin)
        assert set(rows) == {TileKind.QKV, TileKind.O, TileKind.GATE_UP, TileKind.DOWN}
        assert all(max(r) <= (256 if tall else 128) for r in rows.values()) and cs.stream.plan.tiles.tall == tall
        if tall:
            assert all(max(r) > 128 for r in rows.values())
            if preset == "llama-3.2-1b":
                assert rows[TileKind.GATE_UP] == rows[TileKind.O] == rows[TileKind.DOWN] == {256}
        assert lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d, bf16_x=True,
                              token_group=16) >= lim.min_ring_pages


def test_tile_wide_rows_takes_128_or_256() -> None:
    with pytest.raises(ValueError, match="tile_wide_rows"):
        BuildParams.of("lpt", tile_wide_rows=192)
