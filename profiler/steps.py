"""Several decode steps' records as one, laid back to back: what `megakernel profile --steps N` shows.

Every backend records each of the N steps; step k+1 is shifted to begin 1 ns after step k's last end. On
the GPU the host's time between two launches (reading the timing records back, building the next batch)
is not part of a decode loop's step, so leaving it out keeps the chart about the kernel; inside a step
every time stays as recorded.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from profiler.marks import MARK_LAST_PAGE_CYCLES
from profiler.record import ProfileRecord, concat_records

STEP_GAP_NS = 1


def shifted(record: ProfileRecord, delta_ns: int) -> ProfileRecord:
    """`record` with every timestamp moved by `delta_ns` (marks too, except unreached ones and cycle counts)."""
    marks = record.marks_ns
    if marks is not None:
        marks = marks.copy()
        times = np.ones(marks.shape[1], bool)
        if marks.shape[1] > MARK_LAST_PAGE_CYCLES:
            times[MARK_LAST_PAGE_CYCLES] = False
        cols = marks[:, times]
        marks[:, times] = np.where(cols != 0, cols + delta_ns, 0)
    return replace(record, start_ns=record.start_ns + delta_ns, end_ns=record.end_ns + delta_ns, marks_ns=marks)


def back_to_back(records: list[ProfileRecord]) -> ProfileRecord:
    """One record of all steps, each starting STEP_GAP_NS after the previous one's last end."""
    out: list[ProfileRecord] = []
    for rec in records:
        if out and rec.num_instructions and out[-1].num_instructions:
            begin = int(out[-1].end_ns.max()) + STEP_GAP_NS
            rec = shifted(rec, begin - int(rec.start_ns.min()))
        out.append(rec)
    return concat_records(out)
