"""Spans -> the data object of one Gantt panel in gantt.html (profiler/html.py assembles the page).

Columns travel as base64 little-endian typed arrays in span order (by row, then start): compact (~50 B
per instruction) and decoded by the page in one pass, so 10^5 instructions load quickly. Dependencies
(profiler/deps.py) and the marks inside instructions (profiler/marks.py) ride along when the record has them.
"""
from __future__ import annotations

import base64
from typing import Any

import numpy as np

from profiler.colors import opcode_colors
from profiler.deps import dependencies
from profiler.marks import DRAWN_SEGMENTS, drawn_marks
from profiler.record import opcode_of_key
from profiler.spans import Spans


def b64(arr: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode()


def meta_line(meta: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in meta.items())


def _marks_column(spans: Spans) -> str | None:
    """Drawn marks relative to the first start, span order, row-major [N, 5]; NaN where a mark was not reached.
    float32 keeps 1 ns up to 16 ms from the first start, longer than any profiled run of decode steps."""
    marks = drawn_marks(spans.record)
    if marks is None:
        return None
    m = marks[spans.index]
    rel = np.where(m != 0, (m - spans.t0_ns).astype(np.float64), np.nan)
    return b64(rel.reshape(-1), "f4")


def _deps_columns(spans: Spans) -> dict[str, str] | None:
    deps = dependencies(spans.record)
    if deps.num_waits == 0:
        return None
    # Record order throughout; the page maps record indices to spans through the `index` column.
    return {"group_ptr": b64(deps.group_ptr, "i4"), "group_members": b64(deps.group_members, "i4"),
            "wait_ptr": b64(deps.wait_ptr, "i4"), "wait_group": b64(deps.wait_group, "i4"),
            "wait_count": b64(deps.wait_count, "i4")}


def gantt_data(spans: Spans, label: str = "") -> dict[str, Any]:
    """One panel: columns, legend entries, rows, and (when present) marks and dependencies."""
    rec = spans.record
    ops_sorted = sorted(rec.work_names)  # opcodes, an opcode's kinds apart (ProfileRecord.opcode_kinds)
    colors = opcode_colors(rec.work_names)
    width = rec.words.shape[1] - 1
    named = [len(v) for v in rec.operand_names.values()]
    # Operand columns: enough for the longest named list; unnamed opcodes show their first raw words.
    k = min(width, max(named) if named else 8)
    # Every opcode is named (ProfileRecord validates it), so searchsorted gives its legend slot.
    op_slot = np.searchsorted(ops_sorted, rec.work_keys[spans.index])
    counts = np.bincount(op_slot, minlength=len(ops_sorted))
    ops = [
        {"name": rec.work_names[op], "color": colors[op], "count": int(counts[k_op]),
         "operands": rec.operand_names.get(opcode_of_key(op)) or [f"w{j + 1}" for j in range(k)]}
        for k_op, op in enumerate(ops_sorted)
    ]
    row_start = np.searchsorted(spans.row, np.arange(spans.num_rows + 1)).astype(np.int32)
    makespan = int(spans.end_ns.max()) if spans.end_ns.size else 0
    return {
        "label": label,
        "title": str(rec.meta.get("model", "megakernel")) + " decode: per-SM Gantt",
        "meta": meta_line(rec.meta),
        "simulated": rec.simulated,
        "makespan": makespan,
        "rows": [spans.row_label(r) for r in range(spans.num_rows)],
        "row_sm": spans.row_sm.tolist(),
        "row_lane": spans.row_lane.tolist(),
        "ops": ops,
        "num_operands": k,
        "start": b64(spans.start_ns, "f8"),
        "end": b64(spans.end_ns, "f8"),
        "op": b64(op_slot, "i4"),
        "index": b64(spans.index, "i4"),
        "wait": b64(np.minimum(spans.record.wait_ns[spans.index], spans.end_ns - spans.start_ns), "f8"),
        "bytes": b64(rec.bytes_moved[spans.index], "f8"),
        "operands": b64(rec.words[spans.index, 1 : 1 + k], "i4"),
        "row_start": b64(row_start, "i4"),
        "segments": list(DRAWN_SEGMENTS),
        "marks": _marks_column(spans),
        "deps": _deps_columns(spans),
    }
