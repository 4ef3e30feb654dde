"""The host's fit check and ring sizing (engine/cuda/limits.py) against the kernel's shared-memory plan
(csrc/interpreter/config.cuh, parsed here, so the test follows the kernel's constants)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from engine.cuda.limits import InterpreterLimits, UnsupportedOnGPU
from engine.instructions import registry as op
from engine.instructions.head_padding import LANE_HEAD_DIMS, stored_head_dim
from engine.instructions.layout import ModelDims
from engine.instructions.ops.attn_o_proj import AttnOProj
from engine.instructions.ops.tile_matmul import TileKind
from engine.instructions.registry import Opcode
from engine.profiling import chunk_batch_of, decode_batch
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch

CONFIG = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "config.cuh"
H100 = TargetDevice(num_sms=132)


def _limits() -> InterpreterLimits:
    c = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", CONFIG.read_text())}
    return InterpreterLimits(c["PAGE_BYTES"], c["X_FLOATS"], c["OUT_FLOATS"], c["MAX_TOKENS_PER_MATVEC"],
                             c["MAX_GQA"], c["MIN_RING_PAGES"], c["MAX_RING_PAGES"], c["NUM_CONSUMER_WARPS"])


def _fit(preset: str, batch: StepBatch) -> tuple[int, InterpreterLimits]:
    d = ModelDims.from_config(preset_config(preset))
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8), H100)
    lim = _limits()
    return lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d), lim


def test_batch1_decode_gets_the_largest_ring_and_its_inputs_still_fit() -> None:
    ring, lim = _fit("llama-3.2-1b", decode_batch(1, 33, 16))
    assert ring == lim.max_ring_pages > lim.min_ring_pages
    assert lim.x_floats_at(ring) >= 2048  # hidden, the attention output and a 2048-wide down slice


def test_a_full_token_budget_keeps_the_smallest_ring() -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    lim = _limits()
    t = lim.max_tokens(d)
    ring, _ = _fit("llama-3.2-1b", StepBatch.build([list(range(1, t + 1))], [0], [list(range(4))], page_size=16))
    assert ring == lim.min_ring_pages and t * d.hidden <= lim.x_floats_at(ring)


@pytest.mark.parametrize("ring", [9, 10, 11, 12])
def test_x_shrinks_by_one_page_per_ring_page(ring: int) -> None:
    lim = _limits()
    assert lim.x_floats_at(ring) == lim.x_floats - (ring - lim.min_ring_pages) * lim.page_bytes // 4 > 0


def test_inputs_wider_than_x_are_a_clear_error() -> None:
    d = ModelDims.from_config(preset_config("llama-3.1-8b"))
    batch = StepBatch.build([list(range(1, 9))], [0], [list(range(4))], page_size=16)  # 8 x 4096 > x
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt"), H100)
    with pytest.raises(UnsupportedOnGPU, match="activation buffer"):
        _limits().fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d)


def test_a_ring_cap_lowers_the_ring_but_never_below_the_smallest() -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    batch = decode_batch(1, 33, 16)
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8), H100)
    lim = _limits()
    fit = lambda cap: lim.fit_stream(cs.words, 1, 1, d, cap)  # noqa: E731
    assert [fit(c) for c in (None, 11, 4, 99)] == [lim.max_ring_pages, 11, lim.min_ring_pages, lim.max_ring_pages]


def test_fewer_mlp_slices_mean_wider_down_inputs_and_fewer_tokens_per_step() -> None:
    """The token cap follows SplitParams.mlp_slices (a 1-slice MLP feeds down 8192-wide inputs)."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    lim = _limits()
    default, one, eight = lim.max_tokens(d), lim.max_tokens(d, 1), lim.max_tokens(d, 8)
    assert one * d.intermediate <= lim.x_floats < (one + 1) * d.intermediate
    assert one < default == lim.max_tokens(d, 4) <= eight


def test_fused_batch1_streams_fit() -> None:
    """Batch-1 decode and a full prefill chunk of the 1B run ATTN_O_PROJ (one split per 8 pages) and fit."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    lim = _limits()
    t = lim.max_tokens(d)
    for batch in (decode_batch(1, 33, 16), StepBatch.build([list(range(1, t + 1))], [0], [[0]], page_size=16)):
        cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8, fuse_o_proj=True), H100)
        assert cs.stream.plan.fused and (cs.words[:, 0] == Opcode.ATTN_O_PROJ).any()
        assert lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d) >= lim.min_ring_pages


def test_a_fused_op_whose_staged_attention_exceeds_out_is_rejected() -> None:
    """GQA 8 x head_dim 128 in two head ranges: 8 tokens x 512 attention columns staged in `out` > 2048."""
    d = ModelDims(hidden=2048, intermediate=8192, layers=2, n_heads=32, n_kv=4, head_dim=128, vocab=512, eps=1e-5)
    batch = StepBatch.build([list(range(1, 9))], [0], [[0]], page_size=16)
    lim = _limits()
    for chunks, fits in ((2, False), (4, True)):
        cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8, fuse_o_proj=True,
                                                         fused_head_chunks=chunks), H100)
        assert cs.stream.plan.fused
        if fits:
            lim.fit_stream(cs.words, 8, 1, d)
        else:
            with pytest.raises(UnsupportedOnGPU, match="ATTN_O_PROJ block .*staged: 512 columns.* exceeds the out buffer"):
                lim.fit_stream(cs.words, 8, 1, d)


def test_fused_weight_rows_must_be_16_byte_multiples() -> None:
    d = ModelDims(hidden=64, intermediate=128, layers=1, n_heads=2, n_kv=1, head_dim=20, vocab=64, eps=1e-5)
    words = np.array([op.encode(AttnOProj(seq=0, kv_group=0, head_begin=0, head_end=1, row_begin=0, row_end=16))])
    with pytest.raises(UnsupportedOnGPU, match="16-byte"):  # 20 bf16 = 40 bytes
        _limits().fit_stream(words, 1, 1, d)
    words = np.array([op.encode(AttnOProj(seq=0, kv_group=0, head_begin=0, head_end=2, row_begin=0, row_end=16))])
    _limits().fit_stream(words, 1, 1, d)  # 40 bf16 = 80 bytes


MMA = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "dot_rows_mma.cuh"
SHORT_ROWS = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "dot_short_rows.cuh"


def test_short_row_bound_default_follows_the_kernel() -> None:
    """InterpreterLimits' default for rows off the tensor cores is the kernel's SHORT_ROW_MAX_K (the module's
    attribute sets it on a GPU; CPU-built limits use the default)."""
    k = int(re.search(r"inline constexpr int SHORT_ROW_MAX_K = (\d+);", SHORT_ROWS.read_text()).group(1))
    assert _limits().short_row_max_k == k


@pytest.mark.parametrize("preset,ring", [("llama-3.2-1b", 13), ("llama-3.1-8b", 13)])
def test_bf16_x_gives_batch1_tensor_core_steps_the_largest_ring(preset: str, ring: int) -> None:
    """With the kernel's tensor-core matvecs (bf16 x, activations.cuh) batch-1 x takes half the floats: the 8B's
    4096-wide hidden then fits beside 13 ring pages too."""
    from dataclasses import replace as dc_replace
    chunk = int(re.search(r"inline constexpr int MMA_CHUNK = (\d+);", MMA.read_text()).group(1))
    lim = dc_replace(_limits(), mma_chunk=chunk)
    d = ModelDims.from_config(preset_config(preset))
    budget = lim.one_token_slice_floats(d, bf16_x=True)
    cs = compile_stream(d, decode_batch(1, 33, 16), 16, BuildParams.of(
        "lpt", min_pages_per_split=8, one_token_slice_floats=budget, one_token_slice_unit=chunk,
        max_out_floats=lim.out_floats), H100)
    assert lim.fit_stream(cs.words, 1, 1, d, bf16_x=True) == ring
    assert lim.fit_stream(cs.words, 1, 1, d, bf16_x=False) <= ring  # counted as fp32 the 8B gets 12
    assert all((b - a) % chunk == 0 and b - a <= lim.page_bytes // 4 for a, b in cs.stream.plan.slices)


def _mma_limits() -> InterpreterLimits:
    from dataclasses import replace as dc_replace
    chunk = int(re.search(r"inline constexpr int MMA_CHUNK = (\d+);", MMA.read_text()).group(1))
    return dc_replace(_limits(), mma_chunk=chunk)


@pytest.mark.parametrize("k,takes", [(2048, True), (4096, True), (384, True), (256, False), (64, False), (2000, False)])
def test_rows_take_the_tensor_cores_in_whole_chunks_past_the_short_rows(k: int, takes: bool) -> None:
    """dot_rows_mma.cuh mma_row_ok: K > SHORT_ROW_MAX_K (256) and a multiple of MMA_CHUNK (128)."""
    assert _mma_limits().row_takes_mma(k) == takes
    assert not _limits().row_takes_mma(2048)  # limits without the module's chunk: no tensor-core rows


@pytest.mark.parametrize("fused,panels,want", [(True, True, {2048, 4096}), (True, False, {2048, 4096, 64}),
                                               (False, True, {2048, 4096})])
def test_matvec_row_elems_of_a_1b_decode_stream(fused: bool, panels: bool, want: set[int]) -> None:
    """Every row length the page matvecs of a batch-1 1B step read: hidden (QKV, gate/up, LM head, the split
    O-proj's 32 x 64 columns), the 4096-wide down slices, and a fused op's one-head W_o slice unless it comes as
    panel pages."""
    lim = _mma_limits()
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    cs = compile_stream(d, decode_batch(1, 33, 16), 16, BuildParams.of(
        "lpt", min_pages_per_split=8, fuse_o_proj=fused, fused_head_chunks=4 if fused else None,
        one_token_slice_floats=lim.one_token_slice_floats(d, bf16_x=True), one_token_slice_unit=lim.mma_chunk,
        max_out_floats=lim.out_floats), H100)
    assert cs.stream.plan.fused == fused
    assert lim.matvec_row_elems(cs.words, d, w_o_panels=panels) == want


def test_panel_widths_are_the_kernels() -> None:
    """limits.PANEL_WIDTHS is panel_pages.cuh's panel_k_ok (the W_o slices the fused op takes as panel pages)."""
    from engine.cuda.limits import PANEL_WIDTHS
    text = (Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "panel_pages.cuh").read_text()
    body = re.search(r"bool panel_k_ok\(int K\) \{ return ([^;]+); \}", text).group(1)
    assert tuple(sorted(int(k) for k in re.findall(r"K == (\d+)", body))) == PANEL_WIDTHS


def test_bf16_x_doubles_the_8b_step() -> None:
    """Tensor-core inputs are bf16 rows (activations.cuh x_is_bf16): the 8B's 4096-wide rows fit 8 tokens of x
    instead of 4; the 1B keeps its 8 (the matvec's own cap)."""
    c = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", CONFIG.read_text())}
    lim = InterpreterLimits(c["PAGE_BYTES"], c["X_FLOATS"], c["OUT_FLOATS"], c["MAX_TOKENS_PER_MATVEC"],
                            c["MAX_GQA"], c["MIN_RING_PAGES"], c["MAX_RING_PAGES"], c["NUM_CONSUMER_WARPS"],
                            mma_chunk=128, x_row_skew=c["X_ROW_SKEW"])
    d8, d1 = (ModelDims.from_config(preset_config(p)) for p in ("llama-3.1-8b", "llama-3.2-1b"))
    assert lim.max_tokens(d8) == 4 and lim.max_tokens(d8, bf16_x=True) == 8
    assert lim.max_tokens(d1) == lim.max_tokens(d1, bf16_x=True) == 8
    assert lim.max_tokens(d8, mlp_slices=1, bf16_x=True) == 2  # 14336-wide down rows: 2 fit even in bf16


def _grouping_limits() -> InterpreterLimits:
    c = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", CONFIG.read_text())}
    return InterpreterLimits(c["PAGE_BYTES"], c["X_FLOATS"], c["OUT_FLOATS"], c["MAX_TOKENS_PER_MATVEC"],
                             c["MAX_GQA"], c["MIN_RING_PAGES"], c["MAX_RING_PAGES"], c["NUM_CONSUMER_WARPS"],
                             mma_chunk=128, x_row_skew=c["X_ROW_SKEW"], max_tokens_per_step=c["MAX_TOKENS_PER_STEP"],
                             max_token_group=c["MAX_TOKEN_GROUP"])


def test_token_groups_lift_the_step_cap_where_every_block_fits_the_ring() -> None:
    """The 1B runs steps of many tokens in groups of 16 (every matvec on the tensor cores, 16 bf16 rows of 2048 fit
    x), SmolLM2 (576-wide rows: CUDA cores) in groups of 8 (token_groups.cuh); the 8B's smallest gate/up block
    (2 x 16 rows of 8 KB) does not fit the 9-page ring, so its step stays one group, of 8 (4096-wide rows)."""
    lim = _grouping_limits()
    for preset, group in (("llama-3.2-1b", 16), ("smollm2-135m", 8)):
        d = ModelDims.from_config(preset_config(preset))
        assert lim.token_group(d, bf16_x=True) == group and lim.max_tokens(d, bf16_x=True) == lim.max_tokens_per_step
    d8 = ModelDims.from_config(preset_config("llama-3.1-8b"))
    assert lim.token_group(d8, bf16_x=True) == 8
    assert not lim.groups_fit(d8) and lim.max_tokens(d8, bf16_x=True) == 8


def test_the_tensor_core_token_group_follows_its_option_and_the_matvec_path() -> None:
    """16 rows only where every matvec input takes the tensor cores: the CUDA cores' 8 without bf16 x, and
    KernelOptions.mma_token_group caps it (8 restores the CUDA cores' group on the tensor cores)."""
    lim = _grouping_limits()
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    assert lim.token_group(d, bf16_x=False) == 8
    assert lim.token_group(d, bf16_x=True, group_cap=8) == 8 and lim.token_group(d, bf16_x=True, group_cap=12) == 12
    assert lim.token_group(d, bf16_x=True, group_cap=64) == lim.max_token_group == 16
    assert lim.x_bf16(16, d.hidden, True) and not lim.x_bf16(17, d.hidden, True)


GROUP_KW = {"min_pages_per_split": 8, "token_group": 8, "held_pages": 9, "page_bytes": 16384, "max_out_floats": 2048}


@pytest.mark.parametrize("group", [8, 16])
@pytest.mark.parametrize("tokens,seqs", [(128, 1), (32, 32), (70, 12), (16, 16)])
def test_steps_of_several_groups_fit_the_ring(tokens: int, seqs: int, group: int) -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    lens = [tokens - seqs + 1] + [1] * (seqs - 1)
    batch = StepBatch.build([list(range(1, n + 1)) for n in lens], [0] * seqs, [list(range(9 * s, 9 * s + 9))
                                                                                for s in range(seqs)], page_size=16)
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", **{**GROUP_KW, "token_group": group}), H100)
    assert not cs.stream.plan.fused
    lim = _grouping_limits()
    assert lim.fit_stream(cs.words, tokens, seqs, d, bf16_x=True, token_group=group) >= lim.min_ring_pages


def test_a_grouped_block_larger_than_the_ring_is_a_clear_error() -> None:
    """Without the builder's held-page cut a 128-token step's gate/up blocks exceed the ring the kernel would
    hold them in (it would wait forever for the loader): refused on the host."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    batch = StepBatch.build([list(range(1, 129))], [0], [list(range(9))], page_size=16)
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8), H100)
    with pytest.raises(UnsupportedOnGPU, match="keeps them in the ring"):
        _grouping_limits().fit_stream(cs.words, 128, 1, d, bf16_x=True)


@pytest.mark.parametrize("hd", [64, 80, 96, 100, 128, 256])
def test_every_llama_head_dim_is_stored_in_one_the_kernel_runs(hd: int) -> None:
    d = ModelDims(hidden=2048, intermediate=8192, layers=2, n_heads=16, n_kv=4, head_dim=stored_head_dim(hd),
                  vocab=512, eps=1e-5, model_head_dim=hd)
    _limits().check_model(d)


def test_a_head_dim_past_the_widest_lane_width_is_refused_naming_the_field() -> None:
    d = ModelDims(hidden=2048, intermediate=8192, layers=2, n_heads=4, n_kv=4, head_dim=stored_head_dim(512),
                  vocab=512, eps=1e-5)
    with pytest.raises(UnsupportedOnGPU, match=r"^head_dim 512: the megakernel runs head dims up to 256"):
        _limits().check_model(d)


def test_lane_head_dims_are_the_kernels_attention_paths() -> None:
    """Each stored head dim has its dims-per-lane path in both attention opcodes (32: the fallthrough)."""
    ops = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "ops"
    for name in ("attn_partial.cuh", "attn_o_proj.cuh"):
        dispatched = {int(n) for n in re.findall(r"g\.head_dim == (\d+)\) return", (ops / name).read_text())}
        assert dispatched | {32} == set(LANE_HEAD_DIMS), name


_TILES = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "attention_tiles.cuh"


def _tile_limits() -> InterpreterLimits:
    """_limits() with the tensor-core attention's scratch rows (attention_tiles.cuh, parsed)."""
    t = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", _TILES.read_text())}
    warps = int(re.search(r"NUM_CONSUMER_WARPS = (\d+);", CONFIG.read_text()).group(1))  # type: ignore[union-attr]
    buffers = {64: t["TILE_KV_BUFFERS_SMALL_HEAD"], 128: t["TILE_KV_BUFFERS_LARGE_HEAD"]}  # tile_kv_buffers
    rows = tuple((hd, t["TILE_ROWS"] * warps + 2 * n * t["TILE_KEYS"]) for hd, n in buffers.items())
    return dataclasses.replace(_limits(), attn_tile_rows=rows, attn_tile_skew=t["TILE_SKEW"])


@pytest.mark.parametrize("hd", [64, 128])
def test_a_prompt_chunk_keeps_x_room_for_the_tensor_core_attention(hd: int) -> None:
    """A 512-wide model's prompt chunk needs little x for its matvecs, so its ring would grow; with attn_tiles the
    x left must still hold the tile path's scratch (the kernel falls back to the CUDA cores otherwise)."""
    d = ModelDims(hidden=512, intermediate=1024, layers=2, n_heads=8, n_kv=2, head_dim=hd, vocab=1000, eps=1e-5)
    batch = StepBatch.build([list(range(1, 9))], [32], [list(range(3))], page_size=16)  # 8 tokens x 4 heads
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=1), H100)
    lim = _tile_limits()
    plain = lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d)
    tiles = lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d, attn_tiles=True)
    assert tiles <= plain and lim.x_floats_at(tiles) >= lim.attn_tile_floats(hd) > 0
    assert lim.x_floats_at(plain) < lim.attn_tile_floats(hd) or plain == tiles


def test_decode_steps_keep_their_ring_with_attn_tiles() -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    batch = decode_batch(1, 33, 16)
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", min_pages_per_split=8), H100)
    lim = _tile_limits()
    assert lim.fit_stream(cs.words, 1, 1, d, attn_tiles=True) == lim.fit_stream(cs.words, 1, 1, d) == lim.max_ring_pages


def test_an_lm_head_written_directly_is_not_cut_by_the_out_buffer() -> None:
    """KernelOptions.lm_head_direct: an LM head of one token group of 2+ sequences writes its logits to global memory
    (ops/lm_head.cuh), so its blocks are about one per SM instead of out_floats / sequences rows; the check of the out
    buffer then does not apply to it, and still does without the option or at more sequences than a group."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    lim = _grouping_limits()
    batch = StepBatch.build([[1]] * 16, [5] * 16, [[s] for s in range(16)], page_size=16)
    kw = {**GROUP_KW, "token_group": 16}
    capped = compile_stream(d, batch, 16, BuildParams.of("lpt", **kw), H100)
    direct = compile_stream(d, batch, 16, BuildParams.of("lpt", **kw, lm_head_direct_max_seqs=16), H100)
    assert len(direct.stream.plan.lm_head) <= 132 < len(capped.stream.plan.lm_head)
    assert lim.fit_stream(direct.words, 16, 16, d, bf16_x=True, token_group=16, lm_direct_max_seqs=16) >= 9
    with pytest.raises(UnsupportedOnGPU, match="LM_HEAD"):
        lim.fit_stream(direct.words, 16, 16, d, bf16_x=True, token_group=16)
    assert SplitParams(**kw, lm_head_direct_max_seqs=16).lm_head_uncapped(16)
    assert not SplitParams(**kw, lm_head_direct_max_seqs=16).lm_head_uncapped(17)  # two groups: held pages
    assert not SplitParams(**kw, lm_head_direct_max_seqs=16).lm_head_uncapped(1)


def test_tiles_lift_the_8b_step_past_one_token_group() -> None:
    """The 8B's gate/up row pairs do not fit a ring held across token groups, so without tiles its step is one token
    group; with them only the LM head runs in groups, and its rows fit."""
    c = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", CONFIG.read_text())}
    lim = InterpreterLimits(c["PAGE_BYTES"], c["X_FLOATS"], c["OUT_FLOATS"], c["MAX_TOKENS_PER_MATVEC"],
                            c["MAX_GQA"], c["MIN_RING_PAGES"], c["MAX_RING_PAGES"], c["NUM_CONSUMER_WARPS"],
                            mma_chunk=128, x_row_skew=c["X_ROW_SKEW"], max_tokens_per_step=c["MAX_TOKENS_PER_STEP"])
    d8, d1 = (ModelDims.from_config(preset_config(p)) for p in ("llama-3.1-8b", "llama-3.2-1b"))
    assert not lim.groups_fit(d8) and lim.groups_fit(d8, tiles=True)
    assert lim.max_tokens(d8, bf16_x=True) == 8
    assert lim.max_tokens(d8, bf16_x=True, tiles=True) == c["MAX_TOKENS_PER_STEP"]
    assert lim.max_tokens(d1, bf16_x=True) == lim.max_tokens(d1, bf16_x=True, tiles=True) == c["MAX_TOKENS_PER_STEP"]


@pytest.mark.parametrize("what", ["prompt-2048", "decode-32", "decode-64", "decode-128"])
def test_the_1b_tile_steps_fit_with_four_x_stages(what: str) -> None:
    """The 1B's steps of many tokens run as tiles (a 2 048-token prompt chunk, decodes of 64 and 128 sequences): each
    fits the interpreter with room for four K steps of every tile's input in flight (tile_matmul.cuh
    tile_takes_pairs)."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    batch = {"prompt-2048": lambda: chunk_batch_of([2048], 2048, 16), "decode-32": lambda: decode_batch(32, 130, 16),
             "decode-64": lambda: decode_batch(64, 130, 16), "decode-128": lambda: decode_batch(128, 130, 16)}[what]()
    cs = compile_stream(d, batch, 16, BuildParams.of("lpt", tile_min_tokens=17, norm_max_tokens=16), H100)
    tiles = [w for w in cs.words if int(w[0]) == Opcode.TILE_MATMUL]
    assert tiles, "the step ran no tiles"
    lim = _limits()
    ring = lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, d, bf16_x=True, token_group=16)
    for w in tiles:
        a = w[3:]
        if int(a[0]) == TileKind.NORM:
            continue
        tokens = int(a[6] - a[5])
        stage_bytes = (2 * 64 if tokens > 64 else 32 if tokens <= 32 else 64) * 128  # tile_streams.cuh tile_stage_bytes
        assert lim.x_floats_at(ring) * 4 // stage_bytes >= 4


_STREAMS = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "tile_streams.cuh"


@pytest.mark.parametrize(("batch", "ring"), [(24, 12), (32, 12), (33, 11), (64, 11)])
def test_decode_tiles_of_up_to_32_tokens_stage_small_boxes_and_get_a_ring_page_more(batch: int, ring: int) -> None:
    """A narrow tile of 32 tokens or fewer stages its x in 32-row boxes (tile_streams.cuh TILE_SMALL_TOKENS, the
    host's TILE_SMALL_X_TOKENS): four stages take 16 KB, so the 1B's decode steps of up to 32 sequences (in tiles past
    one token group) keep a 12-page ring where 33 or more keep 11."""
    from engine.cuda.limits import TILE_SMALL_X_TOKENS

    t = {k: int(v) for k, v in re.findall(r"inline constexpr int (\w+) = (\d+);", _STREAMS.read_text())}
    assert t["TILE_SMALL_TOKENS"] == TILE_SMALL_X_TOKENS
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    b = decode_batch(batch, 130, 16)
    cs = compile_stream(d, b, 16, BuildParams.of("lpt", tile_min_tokens=17, norm_max_tokens=16), H100)
    assert _limits().fit_stream(cs.words, b.num_tokens, b.num_seqs, d, bf16_x=True, token_group=16) == ring
    # KernelOptions.tile_small_x=0: 64-row boxes everywhere, the 11-page ring
    assert _limits().fit_stream(cs.words, b.num_tokens, b.num_seqs, d, bf16_x=True, token_group=16,
                                tile_small_x=False) == 11
