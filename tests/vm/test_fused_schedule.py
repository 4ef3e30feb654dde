"""The fused batch-1 plan (ATTN_O_PROJ): when it applies, how it cuts the work, its dependency graph on
the Llama-3.2-1B shape, and its cost."""
from __future__ import annotations

import random

import pytest

from engine.instructions.format import Wait
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.ops.attn_o_proj import AttnOProj
from engine.instructions.ops.attn_partial import AttnPartial
from engine.instructions.ops.attn_reduce import AttnReduce
from engine.instructions.ops.o_proj_residual import OProjResidual
from engine.instructions.ops.rms_gate_up_silu import RmsGateUpSilu
from engine.instructions.ops.rms_qkv_rope_append import RmsQkvRopeAppend
from engine.instructions.registry import OPCODES
from engine.scheduler.compiler.cost_model import CostParams, cost_inputs
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_splits import copy_ranges, fused_head_ranges
from models.llama.presets import preset_config
from tests.vm.helpers import compile_decode, small_config

SPLIT_ONLY = (AttnPartial, AttnReduce, OProjResidual)


def _covers(ranges: list[tuple[int, int]], lo: int, hi: int) -> bool:
    """Do the non-empty ranges, sorted, tile [lo, hi) exactly?"""
    r = sorted((a, b) for a, b in ranges if b > a)
    return bool(r) and r[0][0] == lo and r[-1][1] == hi and all(x[1] == y[0] for x, y in zip(r, r[1:]))


@pytest.mark.parametrize("batch,context,kw,fused", [
    (1, 9, {"fuse_o_proj": True}, True),
    (1, 9, {"fuse_o_proj": True, "min_pages_per_split": 8}, True),  # the cuda backend's split setting
    (1, 128, {"fuse_o_proj": True}, True),  # 16 pages of 8: the default limit
    (1, 129, {"fuse_o_proj": True}, False),  # 17 pages: split attention
    (1, 65, {"fuse_o_proj": True, "fuse_max_context_pages": 8}, False),  # a lower limit
    (2, 9, {"fuse_o_proj": True}, False),  # two sequences
    (1, 9, {}, False),  # off by default
])
def test_fused_only_for_one_sequence_and_a_short_context(batch: int, context: int, kw: dict, fused: bool) -> None:
    cs = compile_decode(small_config(heads=8, kv_heads=2), "rr", 16, batch=batch, context=context, **kw)
    plan, instrs = cs.stream.plan, cs.stream.instrs
    assert plan.fused == fused == any(isinstance(i, AttnOProj) for i in instrs)
    assert not (fused and any(isinstance(i, SPLIT_ONLY) for i in instrs))
    qkv = [i for i in instrs if isinstance(i, RmsQkvRopeAppend)]
    if not fused:  # the split-attention path: nothing copied, no fused cuts
        assert plan.fused_heads == plan.fused_rows == () and set(plan.qkv_copy) == {(0, 0)}
        assert all(i.copy_begin == i.copy_end == 0 for i in qkv)


@pytest.mark.parametrize("preset,num_sms", [("llama-3.2-1b", 132), ("llama-3.1-8b", 132), ("tiny", 8)])
def test_copy_ranges_cut_hidden_exactly_once_over_the_qkv_blocks(preset: str, num_sms: int) -> None:
    cfg = preset_config(preset)
    cs = compile_decode(cfg, "lpt", num_sms, batch=1, context=9, fuse_o_proj=True)
    plan, H = cs.stream.plan, cfg.hidden_size
    assert plan.fused and len(plan.qkv_copy) == len(plan.qkv) and _covers(list(plan.qkv_copy), 0, H)
    assert all(a % 4 == 0 and b % 4 == 0 for a, b in plan.qkv_copy)  # 16-byte vectors on the GPU
    for layer in range(cfg.num_hidden_layers):  # every layer's QKV blocks carry the plan's copies in order
        qkv = [i for i in cs.stream.instrs if isinstance(i, RmsQkvRopeAppend) and i.header.layer == layer]
        assert [(i.copy_begin, i.copy_end) for i in qkv] == list(plan.qkv_copy)


def test_copy_ranges_fall_back_to_columns_and_empty_ranges() -> None:
    rng = random.Random()
    for _ in range(300):
        hidden, parts = rng.randrange(1, 200), rng.randrange(1, 120)
        cut = copy_ranges(hidden, parts)
        assert len(cut) == parts and _covers(cut, 0, hidden), (hidden, parts)
        assert sum(1 for a, b in cut if a == b) == max(0, parts - hidden)
        if hidden % 4 == 0 and hidden // 4 >= parts:
            assert all(a % 4 == 0 == b % 4 for a, b in cut)
        widths = [b - a for a, b in cut if b > a]
        assert max(widths) - min(widths) <= (4 if hidden % 4 == 0 and hidden // 4 >= parts else 1)


@pytest.mark.parametrize("heads,kv,hd,chunks,want", [
    (8, 2, 64, None, 2),     # G * hd = 256: two ranges of 128 columns
    (8, 2, 128, None, 2),    # 512 columns: two heads (256 columns) each, never one 128-wide head
    (16, 2, 128, None, 4),   # G 8
    (6, 2, 32, None, 1),     # G 3, 96 columns: round(0.75) = 1
    (4, 4, 32, None, 1),     # MHA
    (8, 2, 64, 3, 3),        # explicit
    (8, 2, 64, 99, 4),       # never more than G
])
def test_fused_head_ranges(heads: int, kv: int, hd: int, chunks: int | None, want: int) -> None:
    d = ModelDims.from_config(small_config(heads=heads, kv_heads=kv, head_dim=hd))
    got = fused_head_ranges(d, SplitParams(fused_head_chunks=chunks))
    assert len(got) == want and _covers(got, 0, d.gqa)


@pytest.mark.parametrize("chunks", [None, 1, 2, 3, 4])
@pytest.mark.parametrize("num_sms", [3, 16, 40])
def test_fused_ops_tile_every_group_heads_by_rows(chunks: int | None, num_sms: int) -> None:
    cfg = small_config(heads=8, kv_heads=2, head_dim=32, hidden=96)  # G = 4
    cs = compile_decode(cfg, "rr", num_sms, batch=1, context=9, fuse_o_proj=True, fused_head_chunks=chunks)
    for layer in range(cfg.num_hidden_layers):
        for g in range(2):
            cells = {(h, r) for i in cs.stream.instrs if isinstance(i, AttnOProj)
                     and i.header.layer == layer and i.kv_group == g
                     for h in range(i.head_begin, i.head_end) for r in range(i.row_begin, i.row_end)}
            n = sum((i.head_end - i.head_begin) * (i.row_end - i.row_begin) for i in cs.stream.instrs
                    if isinstance(i, AttnOProj) and i.header.layer == layer and i.kv_group == g)
            assert cells == {(h, r) for h in range(4) for r in range(96)} and n == 4 * 96  # each cell once


def test_llama_1b_fused_layer() -> None:
    """The 1B shape on 132 SMs, fused: 8 groups x 2 head ranges x 8 row blocks = 128 ATTN_O_PROJ per layer,
    each waiting for all 128 QKV blocks; gate/up waits for all 128."""
    cfg = preset_config("llama-3.2-1b")
    cs = compile_decode(cfg, "lpt", 132, batch=1, context=33, min_pages_per_split=8, fuse_o_proj=True)
    s, plan = cs.stream, cs.stream.plan
    assert plan.fused and plan.fused_heads == ((0, 2), (2, 4)) and len(plan.fused_rows) == 8
    names = {n: c for c, n in enumerate(s.counter_names)}
    for layer in range(cfg.num_hidden_layers):
        ins = [i for i in s.instrs if i.header.layer == layer]
        qkv = [i for i in ins if isinstance(i, RmsQkvRopeAppend)]
        fused = [i for i in ins if isinstance(i, AttnOProj)]
        gu = [i for i in ins if isinstance(i, RmsGateUpSilu)]
        assert len(qkv) == 128 and len(fused) == 128 and not any(isinstance(i, SPLIT_ONLY) for i in ins)
        assert {i.header.signal for i in qkv} == {names[f"QKV[{layer}]"]}
        assert {i.header.waits for i in fused} == {(Wait(names[f"QKV[{layer}]"], 128),)}
        assert {i.header.signal for i in fused} == {names[f"ATTN_O[{layer}]"]}
        assert {i.header.waits for i in gu} == {(Wait(names[f"ATTN_O[{layer}]"], 128),)}
        assert s.counter_period[names[f"QKV[{layer}]"]] == s.counter_period[names[f"ATTN_O[{layer}]"]] == 128
    counts: dict[str, int] = {}
    for i in s.instrs:
        name = OPCODES.name_of(i)
        counts[name] = counts.get(name, 0) + 1
    assert counts == {"EMBED": 1, "RMS_QKV_ROPE_APPEND": 2048, "ATTN_O_PROJ": 2048, "RMS_GATE_UP_SILU": 2112,
                      "DOWN_RESIDUAL": 2112, "LM_HEAD": 132, "ARGMAX_REDUCE": 1}


def test_fused_cost_is_its_attention_plus_its_matvec() -> None:
    d = ModelDims.from_config(preset_config("llama-3.2-1b"))
    inputs = cost_inputs(d, StepShape(3, 1, 4), [40], CostParams())
    i = AttnOProj(seq=0, kv_group=5, head_begin=1, head_end=3, row_begin=32, row_end=80)
    attn = OPCODES.cost(AttnPartial(0, 5, 0, 1, 1, 3), inputs)
    got = OPCODES.cost(i, inputs)
    k = 2 * d.head_dim
    assert got.weight_bytes == attn.weight_bytes + 48 * k * 2
    assert got.flops == attn.flops + 2 * 3 * 48 * k
    assert got.act_bytes == attn.act_bytes + 2 * 3 * 48 * 4
