"""Sub-phases inside instructions, from the GPU timing records' marks (csrc/interpreter/marks.cuh).

The phase table (profiler/phases.py) says which op holds a layer up; this says where inside that
op's exec time (dependencies met -> signal) the time goes. Per opcode, mean µs of:
- `input`:      dependencies met -> activations in shared memory (global reads + norm);
- `1st page`:   input ready -> the first weight page ready for warp 0;
- `weights`:    input ready -> the last weight page ready for its warp (waiting on the HBM stream;
                attention: warp 0's key/value loop);
- `last page`:  that warp's dot products over the last page (the per-page math of one warp);
- `join`:       -> every warp done, after the consumer barrier (attention: last page -> all warps' keys);
- `epilogue`:   -> counter signalled (outputs written, release);
- `loader lead`: dependencies met - the loader issued the last page (> 0: the ring had every page
                 requested before the op could start);
- `page cyc`:   SM clock cycles (clock64) of the last page's dot products alone (batch-1 tensor-core
                 pages only); `last page` also holds its timing marks and release, ≈ 0.3 µs more. Decode
                 attention over ring pages: warp 0's cycles inside its folds (the rest of `weights` waits).
An interval whose two marks were not both reached is left out of its mean. ATTN_O_PROJ uses the matvec
marks with `input` ending when its attention output is ready, so `input` is its whole attention.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.record import ProfileRecord

MARK_INPUT, MARK_LAST_PAGE, MARK_COMPUTED, MARK_LOADER, MARK_LAST_DONE, MARK_FIRST_PAGE = range(6)
MARK_LAST_PAGE_CYCLES = 6  # a cycle count, not a timestamp
READY, END = "ready", "end"
# (name, from, to): a mark index or READY / END
INTERVAL_SPEC: tuple[tuple[str, int | str, int | str], ...] = (
    ("input", READY, MARK_INPUT),
    ("1st page", MARK_INPUT, MARK_FIRST_PAGE),
    ("weights", MARK_INPUT, MARK_LAST_PAGE),
    ("last page", MARK_LAST_PAGE, MARK_LAST_DONE),
    ("join", MARK_LAST_DONE, MARK_COMPUTED),
    ("epilogue", MARK_COMPUTED, END),
    ("loader lead", MARK_LOADER, READY),
)
INTERVALS = tuple(name for name, _, _ in INTERVAL_SPEC)


@dataclass(frozen=True)
class MarkStats:
    name: str
    count: int
    means_ns: tuple[float | None, ...]  # one per INTERVALS entry; None = never measured
    page_cycles: float | None = None  # mean SM cycles of the last page's dot products


def _mean(a: np.ndarray, b: np.ndarray) -> float | None:
    ok = (a != 0) & (b != 0)
    return float((b[ok] - a[ok]).mean()) if ok.any() else None


def mark_stats(record: ProfileRecord) -> list[MarkStats]:
    """Per opcode (in order of first appearance) the mean sub-phase intervals; [] without marks.
    Records with fewer mark columns than an interval needs leave that interval unmeasured."""
    marks = record.marks_ns
    if marks is None or record.num_instructions == 0:
        return []
    ops = record.work_keys  # an opcode's kinds apart (ProfileRecord.opcode_kinds)
    ready = record.start_ns + record.wait_ns
    _, first = np.unique(ops, return_index=True)
    out = []
    for o in ops[np.sort(first)].tolist():
        sel = ops == o
        m = marks[sel]
        if not (m != 0).any():
            continue
        column = {READY: ready[sel], END: record.end_ns[sel]}
        zeros = np.zeros(int(sel.sum()), np.int64)
        at = lambda k: column[k] if isinstance(k, str) else (m[:, k] if k < m.shape[1] else zeros)  # noqa: E731
        means = tuple(_mean(at(a), at(b)) for _, a, b in INTERVAL_SPEC)
        out.append(MarkStats(record.work_names[int(o)], int(sel.sum()), means, _page_cycles(m)))
    return out


def _page_cycles(m: np.ndarray) -> float | None:
    if m.shape[1] <= MARK_LAST_PAGE_CYCLES:
        return None
    cyc = m[:, MARK_LAST_PAGE_CYCLES]
    return float(cyc[cyc > 0].mean()) if (cyc > 0).any() else None


def render_marks(stats: list[MarkStats]) -> list[str]:
    if not stats:
        return []
    w = max(6, *(len(s.name) for s in stats))
    lines = ["inside instructions (mean µs from the timing marks; see profiler/marks.py):",
             f"{'opcode':<{w}} {'count':>6} " + " ".join(f"{n:>11}" for n in INTERVALS) + f" {'page cyc':>9}"]
    for s in stats:
        cells = " ".join(f"{'-' if v is None else f'{v / 1e3:.3f}':>11}" for v in s.means_ns)
        cyc = "-" if s.page_cycles is None else f"{s.page_cycles:.0f}"
        lines.append(f"{s.name:<{w}} {s.count:>6} {cells} {cyc:>9}")
    return lines


# The sub-segments the Gantt draws inside an instruction's work (dependencies met -> signal), in the order
# they follow each other: between READY, these marks, and END. `1st page` falls inside `weights` and is
# drawn as a tick; `loader lead` is not a stretch of the instruction's own time.
DRAWN_SEGMENTS = ("input", "weights", "last page", "join", "epilogue")
DRAWN_MARKS = (MARK_INPUT, MARK_LAST_PAGE, MARK_LAST_DONE, MARK_COMPUTED)
TICK_MARK = MARK_FIRST_PAGE


def drawn_marks(record: ProfileRecord) -> np.ndarray | None:
    """int64 [N, 5]: the raw times of DRAWN_MARKS then TICK_MARK per instruction (0 = not reached or not
    recorded); None when the record has no marks at all."""
    marks = record.marks_ns
    if marks is None or not (marks != 0).any():
        return None
    out = np.zeros((record.num_instructions, len(DRAWN_MARKS) + 1), np.int64)
    for k, col in enumerate((*DRAWN_MARKS, TICK_MARK)):
        if col < marks.shape[1]:
            out[:, k] = marks[:, col]
    return out
