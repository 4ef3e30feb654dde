"""Assign a built stream to SMs: static round-robin, static cost-model list scheduling (LPT with
readiness), or the dynamic work list. Every result carries its predicted timeline.

All static queues are subsequences of one topological order, so an SM that runs its queue in order
can never deadlock; the dynamic list is topological, so claiming in order cannot deadlock either.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.instructions.format import WORDS
from engine.instructions.op_spec import Instruction
from engine.scheduler.compiler.cost_model import CostParams, Timeline, simulate_dynamic, simulate_static
from engine.scheduler.compiler.target import TargetDevice

POLICIES = ("rr", "lpt", "dynamic")


@dataclass
class Schedule:
    policy: str
    num_sms: int
    dynamic: bool
    queues: list[list[int]]  # static: flat indices per SM in run order; dynamic: []
    order: list[int]  # dynamic: claim order; static: concatenation of queues
    # The cost model's predicted timeline, simulated on first use: the GPU path never reads it, and
    # the simulation is a good part of a stream build (paid by the first request of each batch shape).
    simulate: Callable[[], Timeline] = field(repr=False)
    _timeline: Timeline | None = field(default=None, repr=False)

    @property
    def timeline(self) -> Timeline:
        if self._timeline is None:
            self._timeline = self.simulate()
        return self._timeline

    def tensor(self, words: np.ndarray) -> np.ndarray:
        """Static: int32 [num_sms, max_len, WORDS] NOOP-padded; dynamic: int32 [N, WORDS] in claim order."""
        if self.dynamic:
            return np.ascontiguousarray(words[self.order])
        max_len = max(1, max(len(q) for q in self.queues))
        out = np.zeros((self.num_sms, max_len, WORDS), dtype=np.int32)
        for s, q in enumerate(self.queues):
            if q:
                out[s, : len(q)] = words[q]
        return out


def critical_path(instrs: list[Instruction], dur: np.ndarray, sync_ns: float) -> np.ndarray:
    """Longest duration-weighted path from each instruction to the end of the step (its priority)."""
    return np.array(_critical_path(instrs, dur, sync_ns))


def _critical_path(instrs: list[Instruction], dur: np.ndarray, sync_ns: float) -> list[float]:
    consumers: dict[int, list[int]] = {}
    for i, ins in enumerate(instrs):
        for w in ins.header.waits:
            consumers.setdefault(w.counter, []).append(i)
    rank = [0.0] * len(instrs)  # Python floats: numpy's per-element access dominated this loop
    durs = dur.tolist()
    # Every signaller of c sees the same consumers: their best rank is computed once per counter, as
    # soon as all of them are ranked (in built streams consumers follow all signallers of c).
    tail_of: dict[int, float] = {}
    first_consumer = {c: min(js) for c, js in consumers.items()}
    for i in reversed(range(len(instrs))):  # instrs are topologically ordered
        c = instrs[i].header.signal
        if c in tail_of:
            tail = tail_of[c]
        else:
            tail = max((rank[j] for j in consumers.get(c, [])), default=0.0) + (sync_ns if c in consumers else 0.0)
            if first_consumer.get(c, -1) > i:
                tail_of[c] = tail
        rank[i] = durs[i] + tail
    return rank


def list_schedule(instrs: list[Instruction], dur: np.ndarray, p: CostParams,
                  device: TargetDevice) -> list[list[int]]:
    """Readiness-aware list scheduling: the earliest-free SM takes, among instructions already ready
    by then, the one with the longest critical path (else the one that becomes ready first).

    A wait (c, t) is met when t signals to c have been scheduled, at the latest end among them: per
    counter only the count and the running maximum end are kept, and waiters are grouped by target so
    each signal touches only the waits it completes (this runs once per new batch shape, on the
    serving path)."""
    n = len(instrs)
    # Python lists, not arrays: the loop below reads and writes one element at a time, which numpy makes slow. The
    # counters are small dense ints, so per-counter state is in lists too, and the heap functions are bound locally
    # (a 2 064-token step lists 106 000 instructions; this loop was most of its compile).
    rank = _critical_path(instrs, dur, p.sync_ns)
    durs = dur.tolist()
    signal = [ins.header.signal for ins in instrs]
    num_counters = max([c + 1 for c in signal] + [w.counter + 1 for ins in instrs for w in ins.header.waits] + [0])
    waiting_on: list[dict[int, list[int]]] = [{} for _ in range(num_counters)]  # counter -> target -> waiters
    unmet = [0] * n
    for i, ins in enumerate(instrs):
        for w in ins.header.waits:
            waiting_on[w.counter].setdefault(w.target, []).append(i)
        unmet[i] = len(ins.header.waits)
    signalled = [0] * num_counters
    latest_end = [-math.inf] * num_counters
    ready_at = [0.0] * n
    sync_ns = p.sync_ns
    pending: list[tuple[float, float, int]] = [(0.0, -rank[i], i) for i in range(n) if unmet[i] == 0]
    heapq.heapify(pending)
    available: list[tuple[float, int]] = []
    sms = [(0.0, s) for s in range(device.num_sms)]
    queues: list[list[int]] = [[] for _ in range(device.num_sms)]
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    for _ in range(n):
        f, s = sms[0]  # the earliest-free SM (replaced below: one sift instead of a pop and a push)
        while pending and pending[0][0] <= f:
            _t, r, i = heappop(pending)
            heappush(available, (r, i))
        if available:
            i = heappop(available)[1]
        else:
            i = heappop(pending)[2]
        start = ready_at[i]
        if start < f:
            start = f
        end = start + durs[i]
        queues[s].append(i)
        heapreplace(sms, (end, s))
        c = signal[i]
        if c >= 0:
            count = signalled[c] + 1
            signalled[c] = count
            latest = latest_end[c]
            if end > latest:
                latest = latest_end[c] = end
            waiters = waiting_on[c].get(count)
            if waiters:
                ready = latest + sync_ns
                for j in waiters:
                    if ready > ready_at[j]:
                        ready_at[j] = ready
                    unmet[j] -= 1
                    if unmet[j] == 0:
                        heappush(pending, (ready_at[j], -rank[j], j))
    return queues


def make_schedule(policy: str, instrs: list[Instruction], dur: np.ndarray, p: CostParams,
                  device: TargetDevice) -> Schedule:
    if policy not in POLICIES:
        raise ValueError(f"policy: unknown {policy!r}; choose one of {', '.join(POLICIES)}")
    n, num_sms = len(instrs), device.num_sms
    if policy == "rr":
        queues = [list(range(s, n, num_sms)) for s in range(num_sms)]
        return Schedule("rr", num_sms, False, queues, [i for q in queues for i in q],
                        lambda: simulate_static(queues, instrs, dur, p))
    queues = list_schedule(instrs, dur, p, device)
    if policy == "lpt":
        return Schedule("lpt", num_sms, False, queues, [i for q in queues for i in q],
                        lambda: simulate_static(queues, instrs, dur, p))
    # Dynamic: claim in the list scheduler's start order (topological: deps end before start).
    planned = simulate_static(queues, instrs, dur, p)
    order = sorted(range(n), key=lambda i: (planned.start_ns[i], i))
    return Schedule("dynamic", num_sms, True, [], order,
                    lambda: simulate_dynamic(order, instrs, dur, p, device))
