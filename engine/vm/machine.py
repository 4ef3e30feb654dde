"""The reference VM: executes static per-SM queues or the dynamic work list, as the GPU will.

At every step a random (seeded) SM whose current instruction's waits are satisfied runs it to
completion and signals. Dynamic mode claims list entries in order through a monotonic head, like the
kernel's atomicAdd. No runnable SM while work is left -> DeadlockError naming every blocked
instruction and its unmet waits. With `check_races`, every access is checked (see race.py).
Each instruction runs through its opcode's module, found in the VM's opcode table (the product's by default).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from engine.instructions.format import OP_NOOP, W_OPCODE, WORDS
from engine.instructions.op_spec import Instruction
from engine.instructions.registry import OPCODES, OpcodeTable
from engine.vm.buffers import GlobalBuffers
from engine.vm.race import RaceDetector, describe


class DeadlockError(RuntimeError):
    """No SM can make progress but instructions remain."""


@dataclass
class SyncState:
    """A stream's counters and dynamic-queue head; monotonic across the steps run with it."""

    counters: np.ndarray  # int64 [C]
    period: np.ndarray  # int64 [C]
    queue_head: int = 0
    epoch: int = 0

    @staticmethod
    def fresh(period: np.ndarray) -> SyncState:
        return SyncState(np.zeros(len(period), np.int64), np.asarray(period, np.int64))


@dataclass
class StepTrace:
    order: list[int]  # flat indices in execution order
    sm_of: list[int]  # SM that ran each flat index


def decode_static(queues: np.ndarray, table: OpcodeTable) -> list[list[Instruction]]:
    """Each SM's queue as instructions, up to its first NOOP."""
    if queues.ndim != 3 or queues.shape[2] != WORDS:
        raise ValueError(f"static queues: expected int32 [num_sms, max_len, {WORDS}], got {queues.shape}")
    out = []
    for sm in range(queues.shape[0]):
        q = []
        for row in queues[sm]:
            if row[W_OPCODE] == OP_NOOP:
                break
            q.append(table.decode(row))
        out.append(q)
    return out


class VM:
    def __init__(self, bufs: GlobalBuffers, seed: int = 0, check_races: bool = True,
                 table: OpcodeTable = OPCODES) -> None:
        self.bufs = bufs
        self.rng = random.Random(seed)
        self.check_races = check_races
        self.table = table

    def ready(self, ins: Instruction, sync: SyncState) -> bool:
        """Whether every counter `ins` waits on reached its target this step."""
        return all(sync.counters[w.counter] >= sync.epoch * sync.period[w.counter] + w.target
                   for w in ins.header.waits)

    def run_one(self, idx: int, ins: Instruction, sync: SyncState, det: RaceDetector | None) -> None:
        """Execute instruction `idx` (its accesses to the race detector first) and signal its counter."""
        if det is not None:
            det.record(idx, self.table.accesses(ins, self.bufs))
        self.table.execute(ins, self.bufs)
        if ins.header.signal >= 0:
            sync.counters[ins.header.signal] += ins.header.signal_amount

    def _deadlock(self, blocked: list[tuple[int, int, Instruction]], sync: SyncState) -> DeadlockError:
        lines = []
        for sm, idx, ins in blocked[:20]:
            unmet = [f"counter {w.counter} = {sync.counters[w.counter] - sync.epoch * sync.period[w.counter]}"
                     f" (this step) < target {w.target}" for w in ins.header.waits if not self.ready_one(w, sync)]
            lines.append(f"  SM {sm}: {describe(idx, ins, self.table)} waits on " + "; ".join(unmet))
        more = f"\n  ... and {len(blocked) - 20} more" if len(blocked) > 20 else ""
        return DeadlockError(f"deadlock: no SM can run, {len(blocked)} blocked:\n" + "\n".join(lines) + more)

    def ready_one(self, w, sync: SyncState) -> bool:  # noqa: ANN001
        return bool(sync.counters[w.counter] >= sync.epoch * sync.period[w.counter] + w.target)

    @torch.inference_mode()
    def run_static(self, queues: np.ndarray, sync: SyncState) -> StepTrace:
        per_sm = decode_static(queues, self.table)
        flat = [ins for q in per_sm for ins in q]
        base = np.cumsum([0] + [len(q) for q in per_sm])
        det = RaceDetector(flat, self.table) if self.check_races else None
        cursor = [0] * len(per_sm)
        trace = StepTrace([], [])
        while True:
            live = [s for s in range(len(per_sm)) if cursor[s] < len(per_sm[s])]
            if not live:
                break
            runnable = [s for s in live if self.ready(per_sm[s][cursor[s]], sync)]
            if not runnable:
                raise self._deadlock([(s, int(base[s]) + cursor[s], per_sm[s][cursor[s]]) for s in live], sync)
            s = self.rng.choice(runnable)
            idx = int(base[s]) + cursor[s]
            self.run_one(idx, per_sm[s][cursor[s]], sync, det)
            trace.order.append(idx)
            trace.sm_of.append(s)
            cursor[s] += 1
        sync.epoch += 1
        return trace

    @torch.inference_mode()
    def run_dynamic(self, words: np.ndarray, num_sms: int, sync: SyncState) -> StepTrace:
        flat = [self.table.decode(row) for row in words]
        n = len(flat)
        det = RaceDetector(flat, self.table) if self.check_races else None
        held: list[int | None] = [None] * num_sms
        done = [False] * num_sms
        trace = StepTrace([], [])
        while not all(done):
            actions = [s for s in range(num_sms) if not done[s] and
                       (held[s] is None or self.ready(flat[held[s]], sync))]
            if not actions:
                raise self._deadlock([(s, held[s], flat[held[s]]) for s in range(num_sms)
                                      if not done[s] and held[s] is not None], sync)
            s = self.rng.choice(actions)
            if held[s] is None:  # claim: idx = atomicAdd(head, 1) - epoch * (N + grid)
                idx = sync.queue_head - sync.epoch * (n + num_sms)
                sync.queue_head += 1
                if idx >= n:
                    done[s] = True
                else:
                    held[s] = idx
                continue
            idx = held[s]
            self.run_one(idx, flat[idx], sync, det)
            trace.order.append(idx)
            trace.sm_of.append(s)
            held[s] = None
        sync.epoch += 1
        return trace
