"""The VM of a tensor-parallel group: every rank's static queues interleaved in one process, as N GPUs run them.

Each rank has its own VM (buffers, counters, race detector) over the same stream; an instruction whose opcode
exchanges data with the other ranks (OpSpec.cross_rank: TP_ALLREDUCE, TP_ARGMAX) runs in two phases: once its counter
waits are met it publishes (a step of its own in the interleaving), and it executes once every rank has published as
often. At every step a random (seeded) rank and SM that can move does. No rank can move while work is left -> DeadlockError
naming every blocked instruction, its rank and whether it waits on counters or on the other ranks.
"""
from __future__ import annotations

import random

import numpy as np
import torch

from engine.vm.machine import VM, DeadlockError, StepTrace, SyncState, decode_static
from engine.vm.race import RaceDetector, describe


class RankGroupVM:
    """The ranks' VMs (rank order; each with its buffers' `tp` exchange set) run one step together."""

    def __init__(self, vms: list[VM], seed: int = 0) -> None:
        if not vms:
            raise ValueError("RankGroupVM: no ranks")
        self.vms = vms
        self.rng = random.Random(seed)

    @torch.inference_mode()
    def run_static(self, queues: list[np.ndarray], syncs: list[SyncState]) -> list[StepTrace]:
        """One step of every rank: rank r runs `queues[r]` (static per-SM queues) with `syncs[r]`."""
        if not len(queues) == len(syncs) == len(self.vms):
            raise ValueError(f"RankGroupVM: {len(self.vms)} ranks, {len(queues)} queues, {len(syncs)} sync states")
        per_rank = [decode_static(q, vm.table) for q, vm in zip(queues, self.vms)]
        bases = [np.cumsum([0] + [len(q) for q in per_sm]) for per_sm in per_rank]
        dets = [RaceDetector([i for q in per_sm for i in q], vm.table) if vm.check_races else None
                for per_sm, vm in zip(per_rank, self.vms)]
        cursors = [[0] * len(per_sm) for per_sm in per_rank]
        published: set[tuple[int, int]] = set()  # (rank, SM) whose current instruction has published
        traces = [StepTrace([], []) for _ in self.vms]
        while True:
            live = [(r, s) for r, per_sm in enumerate(per_rank) for s in range(len(per_sm))
                    if cursors[r][s] < len(per_sm[s])]
            if not live:
                break
            moves = [(r, s) for r, s in live if self._can_move(r, per_rank[r][s][cursors[r][s]], syncs[r],
                                                                (r, s) in published)]
            if not moves:
                raise self._deadlock(live, per_rank, cursors, bases, syncs, published)
            r, s = self.rng.choice(moves)
            vm, ins = self.vms[r], per_rank[r][s][cursors[r][s]]
            cross = vm.table.spec_of(ins).cross_rank
            if cross is not None and (r, s) not in published:
                cross.publish(ins, vm.bufs)
                published.add((r, s))
                continue
            published.discard((r, s))
            idx = int(bases[r][s]) + cursors[r][s]
            vm.run_one(idx, ins, syncs[r], dets[r])
            traces[r].order.append(idx)
            traces[r].sm_of.append(s)
            cursors[r][s] += 1
        for sync in syncs:
            sync.epoch += 1
        return traces

    def _can_move(self, rank: int, ins: object, sync: SyncState, published: bool) -> bool:
        vm = self.vms[rank]
        if not vm.ready(ins, sync):  # type: ignore[arg-type]
            return False
        cross = vm.table.spec_of(ins).cross_rank  # type: ignore[arg-type]
        return cross is None or not published or cross.ready(ins, vm.bufs)

    def _deadlock(self, live: list[tuple[int, int]], per_rank: list, cursors: list[list[int]],  # noqa: ANN001
                  bases: list[np.ndarray], syncs: list[SyncState], published: set[tuple[int, int]]) -> DeadlockError:
        lines = []
        for r, s in live[:20]:
            ins, vm = per_rank[r][s][cursors[r][s]], self.vms[r]
            idx = int(bases[r][s]) + cursors[r][s]
            why = ("waits for the other ranks to publish" if (r, s) in published else
                   "waits on " + "; ".join(f"counter {w.counter} < target {w.target}" for w in ins.header.waits
                                           if not vm.ready_one(w, syncs[r])))
            lines.append(f"  rank {r} SM {s}: {describe(idx, ins, vm.table)} {why}")
        more = f"\n  ... and {len(live) - 20} more" if len(live) > 20 else ""
        return DeadlockError(f"deadlock: no rank can move, {len(live)} blocked:\n" + "\n".join(lines) + more)
