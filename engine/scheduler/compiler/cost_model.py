"""Predicted time of each instruction (from its opcode's bytes and FLOPs) and of a whole schedule.

An SM is modelled as a fair share of HBM bandwidth and tensor throughput: an instruction takes
`overhead + max(weight_bytes / bw_sm + act_bytes / l2_sm, flops / flops_sm)`, and a wait resolves
`sync_ns` after the signal that satisfies it. Defaults are H100 SXM numbers (3.0 TB/s measured copy
rate, ~990 TFLOP/s bf16 dense at 50 % efficiency). Attention costs use the build-time context lengths.
"""
from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

import numpy as np

from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.op_spec import Instruction
from engine.scheduler.compiler.target import TargetDevice


@dataclass(frozen=True)
class CostParams:
    hbm_bytes_per_ns: float = 3000.0
    l2_bytes_per_ns: float = 7500.0
    flops_per_ns: float = 495_000.0
    weight_bytes: int = 2  # bf16
    kv_bytes: int = 2
    overhead_ns: float = 300.0
    sync_ns: float = 700.0


def cost_inputs(d: ModelDims, shape: StepShape, context_lens: list[int], p: CostParams) -> CostInputs:
    """What each opcode's cost reads for one step (an opcode table's `cost` gives its bytes and FLOPs)."""
    return CostInputs(d, shape, tuple(context_lens), p.weight_bytes, p.kv_bytes)


def time_ns(cost: InstrCost, p: CostParams, device: TargetDevice) -> float:
    """Predicted duration: the SM's fair share of HBM and L2 bandwidth, or of the FLOPs, plus overhead."""
    n = device.num_sms
    mem = cost.weight_bytes / (p.hbm_bytes_per_ns / n) + cost.act_bytes / (p.l2_bytes_per_ns / n)
    return p.overhead_ns + max(mem, cost.flops / (p.flops_per_ns / n))


@dataclass
class Timeline:
    """Simulated execution: per flat instruction index its SM, start, end and time spent waiting."""

    sm: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    wait_ns: np.ndarray

    @property
    def makespan_ns(self) -> float:
        return float(self.end_ns.max()) if len(self.end_ns) else 0.0


def simulate_static(queues: list[list[int]], instrs: list[Instruction], dur: np.ndarray,
                    p: CostParams) -> Timeline:
    """Event simulation of per-SM queues (lists of flat indices). Raises on a deadlocked schedule."""
    n = len(instrs)
    sm_of, start, end, wait = np.zeros(n, np.int64), np.zeros(n), np.zeros(n), np.zeros(n)
    signals: dict[int, list[float]] = {}  # counter -> sorted end times of committed signallers
    cursor, free = [0] * len(queues), [0.0] * len(queues)
    heap: list[tuple[float, int]] = []

    def ready_time(i: int) -> float | None:
        t = 0.0
        for w in instrs[i].header.waits:
            ends = signals.get(w.counter, [])
            if len(ends) < w.target:  # amounts are 1 in built streams
                return None
            t = max(t, ends[w.target - 1] + p.sync_ns)
        return t

    def push(s: int) -> None:
        if cursor[s] < len(queues[s]):
            r = ready_time(queues[s][cursor[s]])
            if r is not None:
                heapq.heappush(heap, (max(free[s], r), s))

    waiters: dict[int, set[int]] = {}  # counter -> SMs whose head instruction waits on it
    target_of: list[dict[int, int]] = [{} for _ in instrs]  # per instruction: counter -> smallest target
    for i, ins in enumerate(instrs):
        for w in ins.header.waits:
            target_of[i][w.counter] = min(w.target, target_of[i].get(w.counter, w.target))

    def advance(s: int) -> None:
        if cursor[s] < len(queues[s]):
            for w in instrs[queues[s][cursor[s]]].header.waits:
                waiters.setdefault(w.counter, set()).add(s)
            push(s)

    for s in range(len(queues)):
        advance(s)
    done = 0
    while heap:
        t0, s = heapq.heappop(heap)
        if cursor[s] >= len(queues[s]):
            continue
        i = queues[s][cursor[s]]
        r = ready_time(i)
        if r is None or max(free[s], r) != t0:
            continue  # stale entry
        sm_of[i], start[i], end[i], wait[i] = s, t0, t0 + dur[i], t0 - free[s]
        free[s] = end[i]
        for w in instrs[i].header.waits:
            waiters[w.counter].discard(s)
        cursor[s] += 1
        done += 1
        c = instrs[i].header.signal
        if c >= 0:
            ends_c = signals.setdefault(c, [])
            bisect.insort(ends_c, end[i])
            # A new signal can make (or make earlier) the heads waiting on c ready: re-evaluate them
            # lazily, but only once c has as many signals as the head's wait needs (the rest is a no-op).
            for s2 in list(waiters.get(c, ())):
                if len(ends_c) >= target_of[queues[s2][cursor[s2]]][c]:
                    push(s2)
        advance(s)
    if done != n:
        raise RuntimeError(f"simulate_static: schedule deadlocks after {done} of {n} instructions")
    return Timeline(sm_of.astype(np.int32), start, end, wait)


def simulate_dynamic(order: list[int], instrs: list[Instruction], dur: np.ndarray, p: CostParams,
                     device: TargetDevice) -> Timeline:
    """SMs claim `order` in sequence whenever free; exact when the order is topological."""
    n = len(instrs)
    sm_of, start, end, wait = np.zeros(n, np.int64), np.zeros(n), np.zeros(n), np.zeros(n)
    signals: dict[int, list[float]] = {}
    free = [(0.0, s) for s in range(device.num_sms)]
    heapq.heapify(free)
    for i in order:
        t_free, s = heapq.heappop(free)
        r = 0.0
        for w in instrs[i].header.waits:
            ends = signals.get(w.counter, [])
            if len(ends) < w.target:
                raise RuntimeError(f"simulate_dynamic: instruction {i} waits on a later signal (not topological)")
            r = max(r, ends[w.target - 1] + p.sync_ns)
        t0 = max(t_free, r)
        sm_of[i], start[i], end[i], wait[i] = s, t0, t0 + dur[i], t0 - t_free
        c = instrs[i].header.signal
        if c >= 0:
            bisect.insort(signals.setdefault(c, []), end[i])
        heapq.heappush(free, (end[i], s))
    return Timeline(sm_of.astype(np.int32), start, end, wait)
