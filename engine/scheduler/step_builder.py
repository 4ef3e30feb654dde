"""Build one step's instruction DAG: opcodes with their (counter, target) waits and signals.

The result (`Stream`) is a topologically ordered list; `policies.py` assigns it to SMs. Dependency
granularity (see docs/INSTRUCTIONS.md §2): QKV blocks signal a per-(layer, KV group) counter, attention
of (seq, group) waits only for its group, O-proj waits the layer's attention, gate/up waits O-proj,
down of slice j waits only the gate/up blocks of slice j, the next layer's QKV waits all downs,
LM head waits the last layer, argmax waits LM head.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.instructions import opcodes as op
from engine.instructions.format import NO_COUNTER, Header, Wait
from engine.instructions.layout import ModelDims, StepShape
from engine.scheduler.step_builder_splits import Plan


@dataclass
class Stream:
    """One step's instructions for a StepShape; `instrs[i].header.instr_id == i`, topological order."""

    dims: ModelDims
    shape: StepShape
    plan: Plan
    instrs: list[op.Instruction]
    counter_period: np.ndarray  # int32 [C]: amount each counter receives per step
    counter_names: list[str]

    @property
    def num_splits(self) -> int:
        return self.plan.num_splits

    @property
    def lm_blocks(self) -> int:
        return len(self.plan.lm_head)

    def words(self) -> np.ndarray:
        return op.encode_many(self.instrs)


class _Counters:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]


def build_stream(dims: ModelDims, shape: StepShape, plan: Plan) -> Stream:
    """Emit the step's instructions in a topological order (every waited signal comes earlier)."""
    ctr = _Counters()
    out: list[op.Instruction] = []
    signals: dict[int, int] = {}

    def emit(cls: type, layer: int, waits: list[tuple[int, int]], signal: int, **operands: int) -> None:
        hdr = Header(instr_id=len(out), layer=layer, waits=tuple(Wait(c, t) for c, t in waits),
                     signal=signal, signal_amount=0 if signal == NO_COUNTER else 1)
        out.append(cls(**operands, header=hdr))
        if signal != NO_COUNTER:
            signals[signal] = signals.get(signal, 0) + 1

    L, S, ns, nh = dims.layers, shape.num_seqs, plan.num_splits, len(plan.attn_heads)
    c_embed = ctr("EMBED")
    for a, b in plan.embed:
        emit(op.Embed, -1, [], c_embed, tok_begin=a, tok_end=b)
    prev_wait = (c_embed, len(plan.embed))
    n_down = len(plan.down_rows) * len(plan.slices)
    for layer in range(L):
        c_qkv = [ctr(f"QKV[{layer}][{g}]") for g in range(dims.n_kv)]
        for a, b, g in plan.qkv:
            emit(op.RmsQkvRopeAppend, layer, [prev_wait], c_qkv[g], row_begin=a, row_end=b, kv_group=g)
        per_group = [sum(1 for *_, g in plan.qkv if g == gg) for gg in range(dims.n_kv)]
        c_attn = ctr(f"ATTN_DONE[{layer}]")
        for s in range(S):
            for g in range(dims.n_kv):
                c_part = c_attn if ns == 1 else ctr(f"ATTN_PART[{layer}][{s}][{g}]")
                for k in range(ns):
                    for h0, h1 in plan.attn_heads:
                        emit(op.AttnPartial, layer, [(c_qkv[g], per_group[g])], c_part,
                             seq=s, kv_group=g, split=k, num_splits=ns, head_begin=h0, head_end=h1)
                if ns > 1:
                    emit(op.AttnReduce, layer, [(c_part, ns * nh)], c_attn, seq=s, kv_group=g, num_splits=ns)
        c_o = ctr(f"OPROJ[{layer}]")
        attn_done = S * dims.n_kv * (1 if ns > 1 else nh)
        for a, b in plan.o_proj:
            emit(op.OProjResidual, layer, [(c_attn, attn_done)], c_o, row_begin=a, row_end=b)
        c_gu = [ctr(f"GATE_UP[{layer}][{j}]") for j in range(len(plan.slices))]
        for a, b, j in plan.gate_up:
            emit(op.RmsGateUpSilu, layer, [(c_o, len(plan.o_proj))], c_gu[j], i_begin=a, i_end=b, slice=j)
        c_down = ctr(f"DOWN[{layer}]")
        for j, (k0, k1) in enumerate(plan.slices):
            n_gu = sum(1 for *_, jj in plan.gate_up if jj == j)
            for a, b in plan.down_rows:
                emit(op.DownResidual, layer, [(c_gu[j], n_gu)], c_down,
                     row_begin=a, row_end=b, k_begin=k0, k_end=k1, slice=j)
        prev_wait = (c_down, n_down)
    c_lm = ctr("LM_HEAD")
    for blk, (a, b) in enumerate(plan.lm_head):
        emit(op.LmHead, -1, [prev_wait], c_lm, v_begin=a, v_end=b, block=blk)
    emit(op.ArgmaxReduce, -1, [(c_lm, len(plan.lm_head))], ctr("DONE"), num_blocks=len(plan.lm_head))
    period = np.array([signals.get(c, 0) for c in range(len(ctr.names))], dtype=np.int32)
    return Stream(dims, shape, plan, out, period, list(ctr.names))
