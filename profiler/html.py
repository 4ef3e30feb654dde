"""Spans -> gantt.html: one self-contained file (canvas Gantt, no CDN, no network).

The spans travel as base64 little-endian typed-array columns inside a JSON <script> block: compact
(~50 B per instruction) and decoded by the page in one pass, so 10^5 instructions load quickly. The
page itself only draws visible spans and merges sub-pixel ones (see gantt_template.html).
"""
from __future__ import annotations

import base64
import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from profiler.colors import opcode_colors
from profiler.spans import Spans

PLACEHOLDER = "/*__PROFILE_DATA__*/"


def _b64(arr: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode()


def meta_line(meta: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in meta.items())


def gantt_data(spans: Spans) -> dict[str, Any]:
    """The page's data object: columns in span order (by row, then start), plus legend and rows."""
    rec = spans.record
    ops_sorted = sorted(rec.opcode_names)
    colors = opcode_colors(rec.opcode_names)
    width = rec.words.shape[1] - 1
    named = [len(v) for v in rec.operand_names.values()]
    # Operand columns: enough for the longest named list; unnamed opcodes show their first raw words.
    k = min(width, max(named) if named else 8)
    # Every opcode is named (ProfileRecord validates it), so searchsorted gives its legend slot.
    op_slot = np.searchsorted(ops_sorted, rec.words[spans.index, 0])
    counts = np.bincount(op_slot, minlength=len(ops_sorted))
    ops = [
        {"name": rec.opcode_names[op], "color": colors[op], "count": int(counts[k_op]),
         "operands": rec.operand_names.get(op) or [f"w{j + 1}" for j in range(k)]}
        for k_op, op in enumerate(ops_sorted)
    ]
    row_start = np.searchsorted(spans.row, np.arange(spans.num_rows + 1)).astype(np.int32)
    makespan = int(spans.end_ns.max()) if spans.end_ns.size else 0
    return {
        "title": str(rec.meta.get("model", "megakernel")) + " decode: per-SM Gantt",
        "meta": meta_line(rec.meta),
        "simulated": rec.simulated,
        "makespan": makespan,
        "rows": [spans.row_label(r) for r in range(spans.num_rows)],
        "row_sm": spans.row_sm.tolist(),
        "row_lane": spans.row_lane.tolist(),
        "ops": ops,
        "num_operands": k,
        "start": _b64(spans.start_ns, "f8"),
        "end": _b64(spans.end_ns, "f8"),
        "op": _b64(op_slot, "i4"),
        "index": _b64(spans.index, "i4"),
        "wait": _b64(rec.wait_ns[spans.index], "f8"),
        "bytes": _b64(rec.bytes_moved[spans.index], "f8"),
        "operands": _b64(rec.words[spans.index, 1 : 1 + k], "i4"),
        "row_start": _b64(row_start, "i4"),
    }


def render_html(spans: Spans) -> str:
    template = resources.files("profiler").joinpath("gantt_template.html").read_text(encoding="utf-8")
    # "</" inside the JSON would end the <script> block early; "<\/" is the same JSON string.
    payload = json.dumps(gantt_data(spans), separators=(",", ":")).replace("</", "<\\/")
    return template.replace(PLACEHOLDER, payload)


def write_html(spans: Spans, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render_html(spans), encoding="utf-8")
    return path
