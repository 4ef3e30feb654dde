"""Build one step's instruction DAG: opcodes with their (counter, target) waits and signals.

The result (`Stream`) is a topologically ordered list; `policies.py` assigns it to SMs of the target device. Dependency
granularity (see docs/INSTRUCTIONS.md §2): QKV blocks signal a per-(layer, KV group) counter, attention
of (seq, group) waits only for its group (cut over heads, KV splits and parts of the sequence's queries), O-proj
waits the layer's attention, gate/up waits O-proj, down of slice j waits only the gate/up blocks of slice j, the
next layer's QKV waits all downs, LM head waits the last layer, argmax waits LM head.

Steps of many tokens (`plan.tiles`) run each layer's linear maps as TILE_MATMUL tiles: QKV tiles signal the same
per-group counters, O tiles wait the layer's attention, GATE_UP tiles all O tiles, DOWN tiles all GATE_UP tiles.

Tensor parallelism (`plan.tp_chunks`): the residual after each O projection (all of them: O_PROJ_RESIDUAL,
ATTN_O_PROJ or O tiles) and after each layer's downs is averaged over the ranks by TP_ALLREDUCE chunks, which wait
for all of them; what waited for them waits for every chunk instead. A rank's greedy stream (`plan.tp_vocab`) ends
with TP_ARGMAX over its share of the vocabulary instead of ARGMAX_REDUCE.

Fused layers (`plan.fused`: opt-in, batch 1, short context) replace attention + O-proj with ATTN_O_PROJ:
every QKV block of the layer signals one counter QKV[l], each ATTN_O_PROJ waits all of them (it adds
into hidden, which every QKV block reads, and into mid, which their copies initialise, besides reading
q and K/V of its group) and signals ATTN_O[l]; gate/up waits all ATTN_O_PROJ of the layer.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from engine.instructions.format import NO_COUNTER, W_COST, Header, Wait
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.op_spec import Instruction
from engine.instructions.ops.argmax_reduce import ArgmaxReduce
from engine.instructions.ops.attn_o_proj import AttnOProj
from engine.instructions.ops.attn_partial import AttnPartial
from engine.instructions.ops.attn_reduce import AttnReduce
from engine.instructions.ops.down_residual import DownResidual
from engine.instructions.ops.embed import Embed
from engine.instructions.ops.lm_head import LmHead
from engine.instructions.ops.o_proj_residual import OProjResidual
from engine.instructions.ops.rms_gate_up_silu import RmsGateUpSilu
from engine.instructions.ops.rms_qkv_rope_append import RmsQkvRopeAppend
from engine.instructions.ops.tile_matmul import NormOf, TileKind, TileMatmul
from engine.instructions.ops.tp_allreduce import TpAllreduce
from engine.instructions.ops.tp_argmax import TpArgmax
from engine.instructions.registry import OPCODES
from engine.scheduler.compiler.step_builder_splits import Plan
from engine.scheduler.compiler.step_builder_tiles import TilePlan


@dataclass
class Stream:
    """One step's instructions for a StepShape; `instrs[i].header.instr_id == i`, topological order.
    `cost_ns`: each instruction's cost estimate (the compiler's), which words() writes as word W_COST."""

    dims: ModelDims
    shape: StepShape
    plan: Plan
    instrs: list[Instruction]
    counter_period: np.ndarray  # int32 [C]: amount each counter receives per step
    counter_names: list[str]
    cost_ns: np.ndarray | None = None
    # encoded() of these very instrs, and words() of them and these costs: a large step's stream is a hundred thousand
    # instructions, and the compiler, the fit check and the backend each read the words
    _encoded: tuple[object, np.ndarray] | None = field(default=None, repr=False, compare=False)
    _words: tuple[object, object, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def num_splits(self) -> int:
        return self.plan.num_splits

    @property
    def lm_blocks(self) -> int:
        return len(self.plan.lm_head)

    def encoded(self) -> np.ndarray:
        """int32 [len(instrs), WORDS] as the instructions encode (W_COST: their headers'), read-only; encoded once
        per instrs list."""
        if self._encoded is None or self._encoded[0] is not self.instrs:
            out = OPCODES.encode_many(self.instrs)
            out.flags.writeable = False
            self._encoded = (self.instrs, out)
        return self._encoded[1]

    def words(self) -> np.ndarray:
        """int32 [len(instrs), WORDS] with cost_ns in W_COST where set, read-only (once per instrs list and costs)."""
        if self._words is None or self._words[0] is not self.instrs or self._words[1] is not self.cost_ns:
            out = self.encoded()
            if self.cost_ns is not None:
                out = out.copy()
                out[:, W_COST] = self.cost_ns
                out.flags.writeable = False
            self._words = (self.instrs, self.cost_ns, out)
        return self._words[2]


class _Counters:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]


Waits = list[tuple[int, int]]


class _Emitter:
    """Appends instructions with consecutive ids and tallies each counter's per-step period."""

    def __init__(self) -> None:
        self.ctr = _Counters()
        self.out: list[Instruction] = []
        self.signals: dict[int, int] = {}
        # Many instructions share one wait list (every block of an op waits on the same producers): each distinct
        # list becomes Wait records once, which was a third of building a new step shape's stream.
        self._waits: dict[tuple[tuple[int, int], ...], tuple[Wait, ...]] = {}

    def __call__(self, cls: type, layer: int, waits: Waits, signal: int, **operands: int) -> None:
        hdr = Header(instr_id=len(self.out), layer=layer, waits=self._records(waits),
                     signal=signal, signal_amount=0 if signal == NO_COUNTER else 1)
        self.out.append(cls(**operands, header=hdr))
        self._signalled(signal, 1)

    def many(self, cls: type, layer: int, waits: Waits, signal: int, rows: Iterable[tuple[int, ...]]) -> int:
        """One instruction per row of operands (in the opcode's OPERANDS order), all with the same waits and signal,
        as __call__ would append them one by one (a large step's tiles are a hundred thousand instructions: one
        wait lookup for all of them, positional construction); returns how many."""
        records, amount = self._records(waits), 0 if signal == NO_COUNTER else 1
        out, first = self.out, len(self.out)
        append = out.append
        for ops in rows:
            append(cls(*ops, header=Header(len(out), layer, records, signal, amount)))
        self._signalled(signal, len(out) - first)
        return len(out) - first

    def _records(self, waits: Waits) -> tuple[Wait, ...]:
        key = tuple(waits)
        records = self._waits.get(key)
        if records is None:
            records = self._waits[key] = tuple(Wait(c, t) for c, t in waits)
        return records

    def _signalled(self, signal: int, count: int) -> None:
        if signal != NO_COUNTER:
            self.signals[signal] = self.signals.get(signal, 0) + count

    def period(self) -> np.ndarray:
        return np.array([self.signals.get(c, 0) for c in range(len(self.ctr.names))], dtype=np.int32)


def _attention(emit: _Emitter, dims: ModelDims, shape: StepShape, plan: Plan, layer: int, c_qkv: list[int],
               per_group: list[int]) -> tuple[int, int]:
    """ATTN_PARTIAL (+ ATTN_REDUCE) of one layer, group g waiting its c_qkv[g] blocks; returns O-proj's wait."""
    ctr, nh, nq = emit.ctr, len(plan.attn_heads), plan.q_parts
    c_attn = ctr(f"ATTN_DONE[{layer}]")
    if plan.spread:  # the step's nq query units per group and head range, dealt out at run time (query_units.py)
        for g in range(dims.n_kv):
            for h0, h1 in plan.attn_heads:
                for unit in range(nq):
                    emit(AttnPartial, layer, [(c_qkv[g], per_group[g])], c_attn, seq=0, kv_group=g, split=0,
                         num_splits=1, head_begin=h0, head_end=h1, q_part=unit, q_parts=nq, spread=1)
        return c_attn, dims.n_kv * nh * nq
    for s in range(shape.num_seqs):
        ns = plan.splits_of(s)
        for g in range(dims.n_kv):
            c_part = c_attn if ns == 1 else ctr(f"ATTN_PART[{layer}][{s}][{g}]")
            for k in range(ns):
                for h0, h1 in plan.attn_heads:
                    for qp in range(nq):
                        emit(AttnPartial, layer, [(c_qkv[g], per_group[g])], c_part, seq=s, kv_group=g, split=k,
                             num_splits=ns, head_begin=h0, head_end=h1, q_part=qp, q_parts=nq)
            if ns > 1:
                emit(AttnReduce, layer, [(c_part, ns * nh * nq)], c_attn, seq=s, kv_group=g, num_splits=ns)
    attn_done = sum(dims.n_kv * (1 if plan.splits_of(s) > 1 else nh * nq) for s in range(shape.num_seqs))
    return c_attn, attn_done


def _attention_split(emit: _Emitter, dims: ModelDims, shape: StepShape, plan: Plan, layer: int,
                     prev_waits: Waits) -> tuple[int, int]:
    """QKV, ATTN_PARTIAL (+ ATTN_REDUCE), O_PROJ_RESIDUAL of one layer; returns gate/up's wait."""
    c_qkv = [emit.ctr(f"QKV[{layer}][{g}]") for g in range(dims.n_kv)]
    for a, b, g in plan.qkv:
        emit(RmsQkvRopeAppend, layer, prev_waits, c_qkv[g], row_begin=a, row_end=b, kv_group=g,
             copy_begin=0, copy_end=0)
    per_group = [sum(1 for *_, g in plan.qkv if g == gg) for gg in range(dims.n_kv)]
    attn_wait = _attention(emit, dims, shape, plan, layer, c_qkv, per_group)
    c_o = emit.ctr(f"OPROJ[{layer}]")
    for a, b in plan.o_proj:
        emit(OProjResidual, layer, [attn_wait], c_o, row_begin=a, row_end=b)
    return c_o, len(plan.o_proj)


def _all_reduced(emit: _Emitter, plan: Plan, layer: int, after_mlp: bool, wait: tuple[int, int]) -> tuple[int, int]:
    """The wait for the residual behind `wait` averaged over the tensor-parallel ranks (TP_ALLREDUCE chunks), or
    `wait` itself with one rank. mid too after the O projection, where the matvec MLP reads it."""
    if not plan.tp_chunks:
        return wait
    c_ar = emit.ctr(f"TP_ALLREDUCE[{layer}][{'MLP' if after_mlp else 'ATTN'}]")
    write_mid = int(not after_mlp and plan.tiles is None)
    for k, (a, b) in enumerate(plan.tp_chunks):
        emit(TpAllreduce, layer, [wait], c_ar, index=2 * layer + after_mlp, chunk=k, col_begin=a, col_end=b,
             write_mid=write_mid)
    return c_ar, len(plan.tp_chunks)


def _tile_norm(emit: _Emitter, tp: TilePlan, layer: int, which: NormOf, waits: Waits) -> tuple[int, int]:
    """One norm's NORM tiles (x_bf16 for the tiles after them); returns the wait for all of them. The final norm's
    ranges are of sequences (each one's last token)."""
    counter = emit.ctr(f"NORM_{which.name}[{layer}]")
    ranges = tp.final_norm_seqs if which == NormOf.FINAL else tp.norm_tokens
    for t0, t1 in ranges:
        emit(TileMatmul, layer, waits, counter, kind=TileKind.NORM, row_begin=0, row_end=0, k_begin=0, k_end=0,
             tok_begin=t0, tok_end=t1, block=int(which))
    return counter, len(ranges)


def _tile_layer(emit: _Emitter, dims: ModelDims, shape: StepShape, plan: Plan, layer: int,
                prev_waits: Waits) -> tuple[int, int]:
    """One layer as TILE_MATMUL tiles around the attention instructions; returns the wait for all its DOWN tiles.
    The residual stays in hidden (engine/instructions/ops/tile_matmul.py): GATE_UP waits every O tile, DOWN every
    GATE_UP tile."""
    tp = plan.tiles
    assert tp is not None
    attn_norm = _tile_norm(emit, tp, layer, NormOf.ATTN, prev_waits)
    c_qkv = [emit.ctr(f"QKV[{layer}][{g}]") for g in range(dims.n_kv)]
    for (a, b, g), (t0, t1) in tp.ordered(list(tp.qkv)):
        emit.many(TileMatmul, layer, [attn_norm], c_qkv[g], ((TileKind.QKV, a, b, 0, dims.hidden, t0, t1, 0),))
    per_group = [len(tp.tokens) * sum(1 for *_, g in tp.qkv if g == gg) for gg in range(dims.n_kv)]
    attn_wait = _attention(emit, dims, shape, plan, layer, c_qkv, per_group)

    def tiles(kind: TileKind, rows: tuple[tuple[int, int], ...], ks: tuple[tuple[int, int], ...], waits: Waits,
              name: str) -> tuple[int, int]:
        counter = emit.ctr(f"{name}[{layer}]")
        blocks = [(a, b, k0, k1) for a, b in rows for k0, k1 in ks]
        emit.many(TileMatmul, layer, waits, counter,
                  ((kind, a, b, k0, k1, t0, t1, 0) for (a, b, k0, k1), (t0, t1) in tp.ordered(blocks)))
        return counter, len(tp.tokens) * len(rows) * len(ks)

    o_done = _all_reduced(emit, plan, layer, False, tiles(TileKind.O, tp.o_rows, tp.o_k, [attn_wait], "OPROJ"))
    mlp_norm = _tile_norm(emit, tp, layer, NormOf.MLP, [o_done])
    gu_rows = tuple((2 * a, 2 * b) for a, b in tp.gate_up)
    gu_done = tiles(TileKind.GATE_UP, gu_rows, ((0, dims.hidden),), [mlp_norm], "GATE_UP")
    return _all_reduced(emit, plan, layer, True, tiles(TileKind.DOWN, tp.down_rows, tp.down_k, [gu_done], "DOWN"))


def _attention_fused(emit: _Emitter, dims: ModelDims, shape: StepShape, plan: Plan, layer: int,
                     prev_waits: Waits) -> tuple[int, int]:
    """QKV (with the mid copies) and ATTN_O_PROJ of one layer; returns gate/up's wait."""
    c_qkv = emit.ctr(f"QKV[{layer}]")
    for (a, b, g), (c0, c1) in zip(plan.qkv, plan.qkv_copy):
        emit(RmsQkvRopeAppend, layer, prev_waits, c_qkv, row_begin=a, row_end=b, kv_group=g,
             copy_begin=c0, copy_end=c1)
    c_ao = emit.ctr(f"ATTN_O[{layer}]")
    for s in range(shape.num_seqs):
        for g in range(dims.n_kv):
            for h0, h1 in plan.fused_heads:
                for r0, r1 in plan.fused_rows:
                    emit(AttnOProj, layer, [(c_qkv, len(plan.qkv))], c_ao, seq=s, kv_group=g,
                         head_begin=h0, head_end=h1, row_begin=r0, row_end=r1)
    return c_ao, shape.num_seqs * dims.n_kv * len(plan.fused_heads) * len(plan.fused_rows)


def _mlp(emit: _Emitter, plan: Plan, layer: int, gu_wait: tuple[int, int]) -> tuple[int, int]:
    """Gate/up and down of one layer; returns the wait for all of its downs."""
    c_gu = [emit.ctr(f"GATE_UP[{layer}][{j}]") for j in range(len(plan.slices))]
    for a, b, j in plan.gate_up:
        emit(RmsGateUpSilu, layer, [gu_wait], c_gu[j], i_begin=a, i_end=b, slice=j)
    c_down = emit.ctr(f"DOWN[{layer}]")
    for j, (k0, k1) in enumerate(plan.slices):
        n_gu = sum(1 for *_, jj in plan.gate_up if jj == j)
        for a, b in plan.down_rows:
            emit(DownResidual, layer, [(c_gu[j], n_gu)], c_down,
                 row_begin=a, row_end=b, k_begin=k0, k_end=k1, slice=j)
    return c_down, len(plan.down_rows) * len(plan.slices)


def build_stream(dims: ModelDims, shape: StepShape, plan: Plan) -> Stream:
    """Emit the step's instructions in a topological order (every waited signal comes earlier)."""
    emit = _Emitter()
    prev_waits: Waits = []  # no EMBED (SplitParams.embed_in_stream): the caller wrote hidden before the step
    if plan.embed:
        c_embed = emit.ctr("EMBED")
        for a, b in plan.embed:
            emit(Embed, -1, [], c_embed, tok_begin=a, tok_end=b)
        prev_waits = [(c_embed, len(plan.embed))]
    attention = _attention_fused if plan.fused else _attention_split
    for layer in range(dims.layers):
        if plan.tiles is not None:
            prev_waits = [_tile_layer(emit, dims, shape, plan, layer, prev_waits)]
            continue
        gu_wait = _all_reduced(emit, plan, layer, False, attention(emit, dims, shape, plan, layer, prev_waits))
        prev_waits = [_all_reduced(emit, plan, layer, True, _mlp(emit, plan, layer, gu_wait))]
    c_lm = emit.ctr("LM_HEAD")
    lm_tiles = plan.tiles.lm_rows if plan.tiles is not None else ()
    n_lm = len(plan.lm_head)
    if lm_tiles:
        assert plan.tiles is not None
        final_norm = _tile_norm(emit, plan.tiles, -1, NormOf.FINAL, prev_waits)
        seqs = plan.tiles.lm_seqs
        for (blk, a, b), (s0, s1) in plan.tiles.ordered([(blk, a, b) for blk, (a, b) in enumerate(lm_tiles)], seqs):
            emit(TileMatmul, -1, [final_norm], c_lm, kind=TileKind.LM_HEAD, row_begin=a, row_end=b, k_begin=0,
                 k_end=dims.hidden, tok_begin=s0, tok_end=s1, block=blk)
        n_lm = len(lm_tiles) * len(seqs)
    else:
        for blk, (a, b) in enumerate(plan.lm_head):
            emit(LmHead, -1, prev_waits, c_lm, v_begin=a, v_end=b, block=blk)
    emit(TpArgmax if plan.tp_vocab else ArgmaxReduce, -1, [(c_lm, n_lm)], emit.ctr("DONE"),
         num_blocks=len(plan.lm_head))
    return Stream(dims, shape, plan, emit.out, emit.period(), list(emit.ctr.names))
