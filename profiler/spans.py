"""ProfileRecord -> Spans: times relative to the first start, and a display row per (SM, sub-lane).

Instructions overlap on one SM when the interpreter pipelines them (the next one's loads start while
the current one computes). Perfetto and our Gantt both need non-overlapping boxes per row, so each SM
is split into sub-lanes by greedy interval colouring (minimal lane count, lowest free lane first).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from profiler.record import ProfileRecord


@dataclass(frozen=True)
class Spans:
    """Columnar spans sorted by (row, start); row r is SM `row_sm[r]`, sub-lane `row_lane[r]`."""

    index: np.ndarray  # int64 [N] instruction index in the record
    row: np.ndarray  # int32 [N]
    start_ns: np.ndarray  # int64 [N], relative to t0_ns
    end_ns: np.ndarray  # int64 [N]
    row_sm: np.ndarray  # int32 [R]
    row_lane: np.ndarray  # int32 [R]
    t0_ns: int  # raw time of the first start
    record: ProfileRecord

    @property
    def num_rows(self) -> int:
        return int(self.row_sm.shape[0])

    def row_label(self, r: int) -> str:
        lane = int(self.row_lane[r])
        return f"SM {int(self.row_sm[r]):03d}" + (f" lane {lane}" if lane else "")

    def operands(self, i: int) -> dict[str, int]:
        """Decoded operand words of instruction `i` (record order)."""
        return decode_operands(self.record, i)


def decode_operands(record: ProfileRecord, i: int) -> dict[str, int]:
    """Named operands per `operand_names`; unnamed opcodes show their non-trailing-zero raw words."""
    words = record.words[i]
    names = record.operand_names.get(int(words[0]))
    if names:
        return {name: int(w) for name, w in zip(names, words[1 : 1 + len(names)])}
    raw = words[1:]
    nonzero = np.flatnonzero(raw)
    raw = raw[: nonzero[-1] + 1] if nonzero.size else raw[:0]
    return {f"w{k + 1}": int(w) for k, w in enumerate(raw)}


def assign_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per interval so intervals in one lane never overlap ([s, e) semantics: touching is fine).

    `start` must be sorted. Uses the fewest lanes possible; reuses the lowest-numbered free lane so
    the unpipelined case stays entirely in lane 0.
    """
    n = start.shape[0]
    lanes = np.zeros(n, np.int32)
    if n < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return lanes  # fast path: no overlap at all
    busy: list[tuple[int, int]] = []  # (end, lane) of lanes in use
    free: list[int] = []  # lanes whose last interval has ended
    num_lanes = 0
    for i in range(n):
        s = int(start[i])
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, num_lanes = num_lanes, num_lanes + 1
        lanes[i] = lane
        heapq.heappush(busy, (int(end[i]), lane))
    return lanes


def to_spans(record: ProfileRecord) -> Spans:
    """Normalise times to the first start and lay every SM out into non-overlapping sub-lanes."""
    n = record.num_instructions
    t0 = int(record.start_ns.min()) if n else 0
    start = record.start_ns - t0
    end = record.end_ns - t0
    # Sort by (sm, start, end) so lanes are assigned in time order within each SM.
    order = np.lexsort((end, start, record.sm)).astype(np.int64)
    sm_sorted = record.sm[order]
    lane = np.zeros(n, np.int32)
    sms, first = np.unique(sm_sorted, return_index=True)
    bounds = list(first) + [n]
    for k in range(len(sms)):
        a, b = bounds[k], bounds[k + 1]
        lane[a:b] = assign_lanes(start[order[a:b]], end[order[a:b]])
    # One row per (sm, lane) in SM order; re-sort so each row's spans are contiguous and by start.
    lanes_per = int(lane.max(initial=0)) + 1
    row_keys, row = np.unique(sm_sorted.astype(np.int64) * lanes_per + lane, return_inverse=True)
    resort = np.lexsort((start[order], row))
    order, row = order[resort], row[resort]
    return Spans(
        index=order,
        row=row.astype(np.int32),
        start_ns=start[order],
        end_ns=end[order],
        row_sm=(row_keys // lanes_per).astype(np.int32),
        row_lane=(row_keys % lanes_per).astype(np.int32),
        t0_ns=t0,
        record=record,
    )
