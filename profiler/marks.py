"""Sub-phases inside instructions, from the GPU timing records' marks (csrc/interpreter/marks.cuh).

The phase table (profiler/phases.py) says which op holds a layer up; this says where inside that
op's exec time (dependencies met -> signal) the time goes. Per opcode, mean µs of:
- `input`:   dependencies met -> activations in shared memory (global reads + norm);
- `weights`: input ready -> the last weight page ready for its warp (waiting on the HBM stream;
             attention: the key/value loop of warp 0);
- `compute`: -> every warp done with the matvec (attention: the merge);
- `epilogue`: -> counter signalled (outputs written);
- `loader lead`: dependencies met - the loader issued the last page (> 0: the ring had every page
                 requested before the op could start).
An interval whose marks were not both reached is left out of its mean.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.instructions.format import W_OPCODE
from profiler.record import ProfileRecord

MARK_INPUT, MARK_LAST_PAGE, MARK_COMPUTED, MARK_LOADER = 0, 1, 2, 3
INTERVALS = ("input", "weights", "compute", "epilogue", "loader lead")


@dataclass(frozen=True)
class MarkStats:
    name: str
    count: int
    means_ns: tuple[float | None, ...]  # one per INTERVALS entry; None = never measured


def _mean(a: np.ndarray, b: np.ndarray) -> float | None:
    ok = (a != 0) & (b != 0)
    return float((b[ok] - a[ok]).mean()) if ok.any() else None


def mark_stats(record: ProfileRecord) -> list[MarkStats]:
    """Per opcode (in order of first appearance) the mean sub-phase intervals; [] without marks."""
    marks = record.marks_ns
    if marks is None or marks.shape[1] <= MARK_LOADER or record.num_instructions == 0:
        return []
    ops = record.words[:, W_OPCODE]
    ready = record.start_ns + record.wait_ns
    _, first = np.unique(ops, return_index=True)
    out = []
    for o in ops[np.sort(first)].tolist():
        sel = ops == o
        m, r, e = marks[sel], ready[sel], record.end_ns[sel]
        if not (m != 0).any():
            continue
        means = (_mean(r, m[:, MARK_INPUT]), _mean(m[:, MARK_INPUT], m[:, MARK_LAST_PAGE]),
                 _mean(m[:, MARK_LAST_PAGE], m[:, MARK_COMPUTED]), _mean(m[:, MARK_COMPUTED], e),
                 _mean(m[:, MARK_LOADER], r))
        out.append(MarkStats(record.opcode_names[int(o)], int(sel.sum()), means))
    return out


def render_marks(stats: list[MarkStats]) -> list[str]:
    if not stats:
        return []
    w = max(6, *(len(s.name) for s in stats))
    lines = ["inside instructions (mean µs from the timing marks; see profiler/marks.py):",
             f"{'opcode':<{w}} {'count':>6} " + " ".join(f"{n:>11}" for n in INTERVALS)]
    for s in stats:
        cells = " ".join(f"{'-' if v is None else f'{v / 1e3:.3f}':>11}" for v in s.means_ns)
        lines.append(f"{s.name:<{w}} {s.count:>6} {cells}")
    return lines
