"""Happens-before from counters, and the race detector built on it.

B is ordered after A only if some wait (c, t) of B is guaranteed to need A's signal: with every
signaller of c in the step known from the stream, A is needed iff `period(c) - amount(A) < t`.
Ordering is transitive. Same-SM program order is deliberately NOT an ordering (the GPU pipelines
consecutive instructions), so the detector proves the stream correct for any queue assignment.

A race is a pair of accesses to overlapping regions, at least one a plain write or a read against an
accumulation, by two instructions neither of which is ordered before the other. The check is
pairwise over the step's access log, so it does not depend on the interleaving the VM picked.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.instructions.accesses import Access, Box
from engine.instructions.op_spec import Instruction
from engine.instructions.registry import OpcodeTable


class RaceError(RuntimeError):
    """Two instructions touch the same region without a counter ordering them."""


def describe(idx: int, instr: Instruction, table: OpcodeTable) -> str:
    ops = ", ".join(f"{n}={getattr(instr, n)}" for n in instr.OPERANDS)
    return f"#{idx} {table.name_of(instr)}(id={instr.header.instr_id}, layer={instr.header.layer}, {ops})"


def happens_before(instrs: list[Instruction]) -> list[int]:
    """hb[i]: bitset of the instructions guaranteed to complete (and be visible) before i starts."""
    total: dict[int, int] = {}
    signallers: dict[int, list[int]] = {}
    for i, ins in enumerate(instrs):
        c = ins.header.signal
        if c >= 0:
            total[c] = total.get(c, 0) + ins.header.signal_amount
            signallers.setdefault(c, []).append(i)
    hb: list[int | None] = [None] * len(instrs)
    visiting: set[int] = set()

    def compute(i: int) -> int:
        # Iterative-friendly depth is bounded by the layer count; recursion is fine for real streams.
        if hb[i] is not None:
            return hb[i]  # type: ignore[return-value]
        visiting.add(i)
        bits = 0
        for w in instrs[i].header.waits:
            for a in signallers.get(w.counter, []):
                if total[w.counter] - instrs[a].header.signal_amount < w.target and a not in visiting:
                    bits |= (1 << a) | compute(a)
        visiting.discard(i)
        hb[i] = bits
        return bits

    order = sorted(range(len(instrs)), key=lambda i: instrs[i].header.instr_id)
    for i in order:  # builder ids are topological, so this keeps the recursion shallow
        compute(i)
    return [h or 0 for h in hb]


def _runs_meet(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    """Do two sorted lists of disjoint [lo, hi) runs intersect? (linear merge)"""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][0] < b[j][1] and b[j][0] < a[i][1]:
            return True
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return False


def _overlap(x: Box, y: Box) -> bool:
    return all(_runs_meet(rx, ry) for rx, ry in zip(x, y))


def _conflict(k1: str, k2: str) -> bool:
    return not (k1 == k2 and k1 in ("r", "acc"))


def _bbox(boxes: tuple[Box, ...]) -> Box:
    return tuple(((min(b[d][0][0] for b in boxes), max(b[d][-1][1] for b in boxes)),) for d in range(len(boxes[0])))


@dataclass
class _Entry:
    idx: int
    kind: str
    boxes: tuple[Box, ...]
    bbox: Box  # cheap pre-filter: prefill steps log thousands of per-token KV boxes


class RaceDetector:
    def __init__(self, instrs: list[Instruction], table: OpcodeTable) -> None:
        self.instrs = instrs
        self.table = table
        self.hb = happens_before(instrs)
        self.log: dict[str, list[_Entry]] = {}

    def record(self, idx: int, acc: list[Access]) -> None:
        """Check instruction idx's accesses against every earlier one of this step, then log them."""
        hb = self.hb[idx]
        for a in acc:
            if not a.boxes:
                continue
            bbox = _bbox(a.boxes)
            entries = self.log.setdefault(a.buffer, [])
            for e in entries:
                if e.idx == idx or (hb >> e.idx) & 1 or not _conflict(e.kind, a.kind):
                    continue
                if (self.hb[e.idx] >> idx) & 1:
                    continue  # e is ordered after idx (possible when the VM runs a racy interleaving)
                if _overlap(e.bbox, bbox) and any(_overlap(x, y) for x in e.boxes for y in a.boxes):
                    raise RaceError(
                        f"race on buffer {a.buffer!r}: {describe(idx, self.instrs[idx], self.table)} ({a.kind}) "
                        f"and {describe(e.idx, self.instrs[e.idx], self.table)} ({e.kind}) touch overlapping "
                        f"regions but no counter wait orders them")
            entries.append(_Entry(idx, a.kind, a.boxes, bbox))
