"""Schedule properties: every instruction exactly once, balanced queues, topological dynamic list,
dependency granularity, and cost-model sanity on the real presets."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.instructions.format import OP_NOOP
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.op_spec import Instruction
from engine.instructions.ops.attn_partial import AttnPartial
from engine.instructions.ops.down_residual import DownResidual
from engine.instructions.ops.o_proj_residual import OProjResidual
from engine.instructions.ops.rms_qkv_rope_append import RmsQkvRopeAppend
from engine.instructions.registry import OPCODES
from engine.scheduler.compiler.policies import POLICIES
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_cache import BuildParams
from engine.scheduler.compiler.attention_cuts import fuses_o_proj, num_attn_splits, seq_attn_splits
from engine.scheduler.compiler.step_builder_splits import fused_head_ranges, make_plan
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from tests.vm.helpers import compile_decode as _compile
from tests.vm.helpers import small_config

H100 = TargetDevice(num_sms=132)


def _check_topological(instrs: list[Instruction], order: list[int]) -> None:
    seen: dict[int, int] = {}
    for i in order:
        for w in instrs[i].header.waits:
            assert seen.get(w.counter, 0) >= w.target, f"{i} claims before its producers"
        if instrs[i].header.signal >= 0:
            seen[instrs[i].header.signal] = seen.get(instrs[i].header.signal, 0) + instrs[i].header.signal_amount


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("num_sms", [1, 5, 32])
def test_each_instruction_once_and_balanced(policy: str, num_sms: int) -> None:
    cs = _compile(small_config(), policy, num_sms, mlp_slices=2)
    n = len(cs.stream.instrs)
    assert sorted(cs.schedule.order) == list(range(n))
    assert [ins.header.instr_id for ins in cs.stream.instrs] == list(range(n))
    _check_topological(cs.stream.instrs, list(range(n)))
    if cs.schedule.dynamic:
        _check_topological(cs.stream.instrs, cs.schedule.order)
        assert cs.tensor.shape == (n, 32)
        ids = cs.tensor[:, 1].tolist()
    else:
        assert cs.tensor.shape[:2] == (num_sms, max(len(q) for q in cs.schedule.queues))
        ids = [int(w[1]) for q in cs.tensor for w in q if w[0] != OP_NOOP]
        lens = [len(q) for q in cs.schedule.queues]
        if policy == "rr":
            assert max(lens) - min(lens) <= 1
        busy = [sum(cs.durations[i] for i in q) for q in cs.schedule.queues]
        assert max(busy) <= cs.schedule.timeline.makespan_ns + 1e-6
        if n >= 4 * num_sms:
            assert min(busy) > 0, "an SM got no work"
    assert sorted(ids) == list(range(n))
    tl = cs.schedule.timeline
    assert np.all(tl.end_ns > tl.start_ns) and tl.makespan_ns >= cs.durations.sum() / num_sms


def test_period_and_granularity() -> None:
    cfg = small_config(heads=8, kv_heads=2)
    cs = _compile(cfg, "rr", 16, mlp_slices=2)
    s = cs.stream
    signals = np.zeros(len(s.counter_period), np.int64)
    for ins in s.instrs:
        if ins.header.signal >= 0:
            signals[ins.header.signal] += ins.header.signal_amount
    assert np.array_equal(signals, s.counter_period)
    name = {i: n for i, n in enumerate(s.counter_names)}
    for ins in s.instrs:
        if isinstance(ins, AttnPartial):  # attention waits only for its own KV group
            assert name[ins.header.waits[0].counter] == f"QKV[{ins.header.layer}][{ins.kv_group}]"
        if isinstance(ins, DownResidual):  # down waits only for its own slice
            assert name[ins.header.waits[0].counter] == f"GATE_UP[{ins.header.layer}][{ins.slice}]"
        if isinstance(ins, RmsQkvRopeAppend):  # a QKV block never straddles a KV group
            assert (ins.row_end - 1) // s.dims.group_rows == ins.row_begin // s.dims.group_rows == ins.kv_group


def test_llama_1b_decode_counts_and_makespan() -> None:
    """The 1B preset on 132 SMs: sizes follow the model dims, and the predicted makespan sits above the
    bytes/bandwidth floor."""
    cfg = preset_config("llama-3.2-1b")
    d = ModelDims.from_config(cfg)
    cs = _compile(cfg, "rr", 132, batch=1, context=129, fuse_o_proj=False)  # the split-attention path
    counts: dict[str, int] = {}
    for ins in cs.stream.instrs:
        name = OPCODES.name_of(ins)
        counts[name] = counts.get(name, 0) + 1
    assert counts["EMBED"] == 1 and counts["ARGMAX_REDUCE"] == 1
    assert counts["O_PROJ_RESIDUAL"] == 16 * 128  # 2048 rows in 16-row blocks
    plan = cs.stream.plan
    assert sum(b - a for a, b, _ in plan.qkv) == d.qkv_rows and sum(b - a for a, b in plan.lm_head) == d.vocab
    weight_bytes = sum(c.weight_bytes for c in cs.costs)
    floor_ns = weight_bytes / BuildParams().cost.hbm_bytes_per_ns
    assert 2.4e9 < weight_bytes < 2.6e9
    assert floor_ns < cs.schedule.timeline.makespan_ns < 2 * floor_ns


def test_min_pages_per_split_keeps_short_contexts_unsplit() -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    shape = StepShape(1, 1, 16)
    unfused = SplitParams(fuse_o_proj=False)
    assert num_attn_splits(d, shape, unfused, H100, 3) == 4  # default: split every page bucket
    assert num_attn_splits(d, shape, replace(unfused, min_pages_per_split=8), H100, 3) == 1
    assert num_attn_splits(d, shape, replace(unfused, min_pages_per_split=8), H100, 10) == 2  # 16-page bucket / 8
    assert num_attn_splits(d, shape, replace(unfused, min_pages_per_split=8), H100, 1000) == 16  # one wave of SMs


@pytest.mark.parametrize("seqs", [1, 2, 3, 4, 16])
def test_whole_wave_splits_give_no_sm_two_attention_instructions(seqs: int) -> None:
    """attn_splits_whole_wave (the default): a long context's splits times the (sequence, group) tasks stay within
    the SMs (rounded up, a few SMs get two: 17 x 8 = 136 on 132)."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    shape = StepShape(seqs, seqs, 16)
    p = SplitParams(min_pages_per_split=8)
    whole = num_attn_splits(d, shape, p, H100, 2000)
    assert whole * seqs * d.n_kv <= H100.num_sms or whole == 1
    assert whole <= num_attn_splits(d, shape, replace(p, attn_splits_whole_wave=False), H100, 2000)
    if seqs == 1:
        assert whole == H100.num_sms // d.n_kv == 16


def test_fused_path_takes_short_batch1_contexts_unsplit() -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    one, two = StepShape(1, 1, 16), StepShape(2, 2, 16)
    p = SplitParams(fuse_o_proj=True)
    assert fuses_o_proj(one, p, 16) and num_attn_splits(d, one, p, H100, 16) == 1  # at the limit: fused, one split
    assert not fuses_o_proj(one, p, 17) and num_attn_splits(d, one, p, H100, 17) > 1  # past it: split attention
    assert not fuses_o_proj(two, p, 3) and not make_plan(d, two, p, H100, 3).fused  # batch 2: never fused
    assert make_plan(d, one, p, H100, 16).fused and not make_plan(d, one, p, H100, 17).fused
    assert not fuses_o_proj(one, replace(p, fuse_max_context_pages=4), 5)
    assert not fuses_o_proj(one, SplitParams(), 1)  # off by default
    # a prompt chunk of one sequence inside one token group: fused up to fuse_max_tokens (the cuda backend's 8)
    grouped = replace(p, token_group=16)
    assert fuses_o_proj(StepShape(12, 1, 16), grouped, 1)
    capped = replace(grouped, fuse_max_tokens=8)
    assert fuses_o_proj(StepShape(8, 1, 16), capped, 1) and not fuses_o_proj(StepShape(9, 1, 16), capped, 1)


@pytest.mark.parametrize("num_sms,batch,cap,want", [
    (132, 1, None, 4),   # 2 groups x 1 seq leave 130 SMs idle: one instruction per head
    (8, 1, None, 2),     # 8 SMs / (2 groups x 2 KV splits): two head ranges per group and split
    (132, 1, 1, 1),      # capped: one instruction per group (the layout before head chunks)
    (132, 66, None, 1),  # 66 seqs x 2 groups fill 132 SMs already
])
def test_attention_heads_are_cut_only_onto_idle_sms(num_sms: int, batch: int, cap: int | None, want: int) -> None:
    cfg = small_config(heads=8, kv_heads=2)  # G = 4
    cs = _compile(cfg, "rr", num_sms, batch=batch, context=9, max_attn_head_chunks=cap, fuse_o_proj=False)
    attn = [i for i in cs.stream.instrs if isinstance(i, AttnPartial) and i.header.layer == 0]
    per_group = {(i.seq, i.kv_group, i.split) for i in attn}
    assert len(attn) == len(per_group) * want
    for key in per_group:  # the ranges of one (seq, group, split) tile the group's heads exactly once
        ranges = sorted((i.head_begin, i.head_end) for i in attn if (i.seq, i.kv_group, i.split) == key)
        assert ranges[0][0] == 0 and ranges[-1][1] == 4 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    o_wait = next(i for i in cs.stream.instrs if isinstance(i, OProjResidual)).header.waits[0]
    assert o_wait.target == cs.stream.counter_period[o_wait.counter]  # O-proj waits for every attention instruction


@pytest.mark.parametrize("preset,multi,one", [("llama-3.2-1b", 4, 2), ("llama-3.2-3b", 4, 2), ("llama-3.1-8b", 7, 4)])
def test_one_token_steps_take_the_fewest_mlp_slices_that_fit(preset: str, multi: int, one: int) -> None:
    d = ModelDims.from_config(preset_config(preset))
    p = SplitParams(one_token_slice_floats=4096)  # the cuda backend's x at its largest ring
    one_tok, two_tok = StepShape(1, 1, 16), StepShape(2, 2, 16)
    cut = make_plan(d, one_tok, p, H100, 2).slices
    assert len(cut) == one and max(b - a for a, b in cut) <= 4096
    assert len(make_plan(d, one_tok, SplitParams(), H100, 2).slices) == multi  # no budget: one per ~2048 columns
    assert len(make_plan(d, two_tok, p, H100, 2).slices) == multi  # several tokens: unchanged
    assert len(make_plan(d, one_tok, replace(p, mlp_slices=3), H100, 2).slices) == 3  # an explicit count wins
    # a budget as wide as the intermediate dim gives a single slice
    assert len(make_plan(d, one_tok, replace(p, one_token_slice_floats=d.intermediate), H100, 2).slices) == 1
    with pytest.raises(ValueError, match="one_token_slice_floats"):
        SplitParams(one_token_slice_floats=0)


def test_one_token_slices_in_tensor_core_chunks() -> None:
    """With a slice unit (the cuda backend's 128-column tensor-core chunk) every one-token K-slice is a whole
    number of chunks when the intermediate dim divides; the presets' cuts are already such, so they do not move."""
    one = StepShape(1, 1, 16)
    llama2 = ModelDims(hidden=4096, intermediate=11008, layers=2, n_heads=32, n_kv=32, head_dim=128, vocab=512, eps=1e-5)
    tiles_only = make_plan(llama2, one, SplitParams(one_token_slice_floats=4096), H100, 2).slices
    chunked = make_plan(llama2, one, SplitParams(one_token_slice_floats=4096, one_token_slice_unit=128), H100,
                        2).slices
    assert any((b - a) % 128 for a, b in tiles_only)  # 11008 / 3 in 16-column tiles: 3664 / 3680 / 3664
    assert len(chunked) == 3 and all((b - a) % 128 == 0 and b - a <= 4096 for a, b in chunked)
    for preset in ("llama-3.2-1b", "llama-3.1-8b"):
        d = ModelDims.from_config(preset_config(preset))
        assert (make_plan(d, one, SplitParams(one_token_slice_floats=4096), H100, 2).slices
                == make_plan(d, one, SplitParams(one_token_slice_floats=4096, one_token_slice_unit=128), H100,
                             2).slices)
    with pytest.raises(ValueError, match="one_token_slice_unit"):
        SplitParams(one_token_slice_unit=0)
def test_an_out_cap_cuts_more_lm_head_blocks_and_fused_head_ranges() -> None:
    """SplitParams.max_out_floats (the cuda backend's out buffer): one instruction's outputs fit it."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    for seqs in (1, 2, 3, 8):
        p = SplitParams(max_out_floats=2048)
        lm = make_plan(d, StepShape(seqs, seqs, 16), p, H100, 2).lm_head
        assert seqs * max(b - a for a, b in lm) <= 2048
        assert (len(lm) == 132) == (seqs <= 2)  # 976-row blocks (one per SM) fit up to two sequences
    # 8 tokens x (G = 4) x 64 head dims = 2048 floats: fits in one head range; a 1024 cap needs two
    assert len(fused_head_ranges(d, SplitParams(fused_head_chunks=1, max_out_floats=2048), 8)) == 1
    assert len(fused_head_ranges(d, SplitParams(fused_head_chunks=1, max_out_floats=1024), 8)) == 2
    with pytest.raises(ValueError, match="max_out_floats"):
        SplitParams(max_out_floats=0)


def test_stream_compiles_pause_the_garbage_collector_and_restore_it() -> None:
    import gc

    from engine.scheduler.compiler.step_builder_cache import gc_paused

    was = gc.isenabled()
    try:
        for start in (True, False):
            (gc.enable if start else gc.disable)()
            with gc_paused():
                assert not gc.isenabled()
            assert gc.isenabled() == start
        gc.enable()
        with pytest.raises(RuntimeError), gc_paused():
            raise RuntimeError("a failed compile")
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("seqs", [1, 2, 3, 5, 8, 16, 40])
@pytest.mark.parametrize("pages", [3, 40, 500, 2000])
def test_per_sequence_splits_of_equal_contexts_are_the_uniform_count(seqs: int, pages: int) -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    shape = StepShape(seqs, seqs, 2048)
    for p in (SplitParams(min_pages_per_split=8), SplitParams(min_pages_per_split=8, attn_splits_whole_wave=False),
              SplitParams(max_attn_splits=4)):
        uniform = num_attn_splits(d, shape, p, H100, pages)
        assert seq_attn_splits(d, shape, replace(p, per_seq_splits=True), H100, (pages,) * seqs) == (uniform,) * seqs


def test_per_sequence_splits_give_a_long_context_the_idle_sms() -> None:
    """One 32k-token sequence among fifteen of 1k (1B, 132 SMs): one split each uniformly; per sequence, the long
    one gets the wave's split slots in proportion to its pages and each short one keeps one."""
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    shape = StepShape(16, 16, 2048)
    p = SplitParams(min_pages_per_split=8, per_seq_splits=True)
    pages = (2000,) + (63,) * 15
    assert num_attn_splits(d, shape, p, H100, 2000) == 1
    got = seq_attn_splits(d, shape, p, H100, pages)
    assert got[1:] == (1,) * 15 and got[0] == H100.num_sms * 2048 // (d.n_kv * (2048 + 15 * 64)) == 11
    plan = make_plan(d, shape, p, H100, 2000, pages)
    assert plan.seq_splits == got and plan.num_splits == 11 and plan.splits_of(3) == 1
    assert make_plan(d, shape, replace(p, per_seq_splits=False), H100, 2000, pages).seq_splits == ()


def _server_like_keys(p: SplitParams, seqs: int = 8, steps: int = 128) -> list[tuple[int, ...]]:
    """The stream key of each of `steps` decode steps of `seqs` sequences 128..248 tokens long (a server's batch
    at 128-token prompts), each one token longer every step."""
    from engine.scheduler.compiler.step_builder_cache import shape_key
    from models.llama.step_batch import StepBatch

    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    keys = []
    for step in range(steps):
        lens = [128 + 120 * i // (seqs - 1) + step for i in range(seqs)]
        tables = [list(range(64 * i, 64 * i + 24)) for i in range(seqs)]
        batch = StepBatch.build([[1]] * seqs, lens, tables, page_size=16)
        keys.append(shape_key(d, batch, 16, BuildParams("lpt", p), H100))
    return keys


def test_similar_contexts_keep_their_stream_while_they_decode() -> None:
    """Per-sequence splits apply to contexts per_seq_min_ratio apart or more: 8 sequences of similar lengths keep
    one stream as they grow, where a tuple of their own splits changed (a compile on the engine thread) each time one
    of them crossed a power-of-two page count."""
    p = SplitParams(min_pages_per_split=8)
    assert len(set(_server_like_keys(p))) == 1
    assert len(set(_server_like_keys(replace(p, per_seq_min_ratio=1)))) == 8


def test_uneven_contexts_at_the_uniform_count_share_the_uniform_stream() -> None:
    """A server's wide decode step mixes new and old contexts (4x apart and more) but leaves each sequence one split:
    its key is the uniform stream's, so the two mixes of one step shape do not compile the same work twice."""
    from engine.scheduler.compiler.step_builder_cache import shape_key
    from models.llama.step_batch import StepBatch

    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    p = SplitParams(min_pages_per_split=8, per_seq_splits=True)

    def key(lens: list[int]) -> tuple[int, ...]:
        tables = [list(range(512 * i, 512 * i + n // 16 + 1)) for i, n in enumerate(lens)]
        return shape_key(d, StepBatch.build([[1]] * len(lens), lens, tables, page_size=16), 16, BuildParams("lpt", p),
                         H100)

    even, uneven = key([200] * 64), key([10] * 8 + [250] * 56)
    assert even == uneven and len(even) == 4
    long_one = key([4000] + [100] * 15)  # a long context among short ones still gets splits of its own
    assert len(long_one) == 4 + 16
