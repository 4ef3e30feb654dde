"""The optimised list scheduler and critical path (engine/scheduler/compiler/policies.py) against the direct
formulations they replaced: same queues, same ranks, on real streams with random durations."""
from __future__ import annotations

import heapq

import numpy as np
import pytest

from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.op_spec import Instruction
from engine.scheduler.compiler.cost_model import CostParams
from engine.scheduler.compiler.policies import critical_path, list_schedule
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder import build_stream
from engine.scheduler.compiler.step_builder_splits import make_plan
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config


def oracle_rank(instrs: list[Instruction], dur: np.ndarray, sync_ns: float) -> np.ndarray:
    consumers: dict[int, list[int]] = {}
    for i, ins in enumerate(instrs):
        for w in ins.header.waits:
            consumers.setdefault(w.counter, []).append(i)
    rank = np.zeros(len(instrs))
    for i in reversed(range(len(instrs))):
        c = instrs[i].header.signal
        tail = max((rank[j] for j in consumers.get(c, [])), default=0.0) + (sync_ns if c in consumers else 0.0)
        rank[i] = dur[i] + tail
    return rank


def oracle_queues(instrs: list[Instruction], dur: np.ndarray, p: CostParams, num_sms: int) -> list[list[int]]:
    """Every signal re-examines every waiter of its counter; the counter's ends are kept sorted."""
    n = len(instrs)
    rank = oracle_rank(instrs, dur, p.sync_ns)
    waiting_on: dict[int, list[int]] = {}
    unmet = np.zeros(n, np.int64)
    for i, ins in enumerate(instrs):
        for w in ins.header.waits:
            waiting_on.setdefault(w.counter, []).append(i)
        unmet[i] = len(ins.header.waits)
    ends: dict[int, list[float]] = {}
    ready_at = np.zeros(n)
    pending = [(0.0, -rank[i], i) for i in range(n) if unmet[i] == 0]
    heapq.heapify(pending)
    available: list[tuple[float, int]] = []
    sms = [(0.0, s) for s in range(num_sms)]
    queues: list[list[int]] = [[] for _ in range(num_sms)]
    for _ in range(n):
        f, s = heapq.heappop(sms)
        while pending and pending[0][0] <= f:
            _, r, i = heapq.heappop(pending)
            heapq.heappush(available, (r, i))
        i = heapq.heappop(available)[1] if available else heapq.heappop(pending)[2]
        end = max(f, ready_at[i]) + dur[i]
        queues[s].append(i)
        heapq.heappush(sms, (end, s))
        c = instrs[i].header.signal
        if c >= 0:
            lst = sorted(ends.setdefault(c, []) + [end])
            ends[c] = lst
            for j in waiting_on.get(c, []):
                w = next(w for w in instrs[j].header.waits if w.counter == c)
                if len(lst) == w.target:
                    ready_at[j] = max(ready_at[j], lst[-1] + p.sync_ns)
                    unmet[j] -= 1
                    if unmet[j] == 0:
                        heapq.heappush(pending, (ready_at[j], -rank[j], j))
    return queues


@pytest.mark.parametrize("preset,num_sms,seqs,tokens,fuse", [
    ("tiny", 8, 1, 1, False), ("tiny", 5, 3, 2, True), ("llama-3.2-1b", 132, 1, 1, False),
    ("llama-3.2-1b", 66, 2, 4, True),
    ("tiny", 8, 1, 4, True), ("llama-3.2-1b", 132, 1, 1, True),  # batch 1, short context: fused ATTN_O_PROJ
])
def test_list_schedule_matches_the_direct_formulation(preset: str, num_sms: int, seqs: int, tokens: int,
                                                      fuse: bool) -> None:
    seed = int(np.random.SeedSequence().entropy % 2**32)  # fresh each run; printed on failure
    rng = np.random.default_rng(seed)
    dims = ModelDims.from_config(preset_config(preset))
    shape = StepShape(seqs * tokens, seqs, 8)
    device = TargetDevice(num_sms=num_sms)
    plan = make_plan(dims, shape, SplitParams(fuse_o_proj=fuse), device, 5)
    assert plan.fused == (fuse and seqs == 1)
    stream = build_stream(dims, shape, plan)
    dur = rng.uniform(100.0, 5000.0, len(stream.instrs))
    p = CostParams()
    np.testing.assert_array_equal(critical_path(stream.instrs, dur, p.sync_ns),
                                  oracle_rank(stream.instrs, dur, p.sync_ns), err_msg=f"seed {seed}")
    assert list_schedule(stream.instrs, dur, p, device) == oracle_queues(stream.instrs, dur, p, num_sms), \
        f"seed {seed}"
