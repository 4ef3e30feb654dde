"""Spans -> Chrome Trace Event / Perfetto JSON (trace.json), and a validator for the fields we rely on.

pid = the GPU (one process), tid = one display row (SM × sub-lane), name = opcode exactly (Perfetto
colours by a hash of the name and ignores `cname`), per-instance details in `args`. Times are µs.
Dependencies are flow events ("s" in the producer's slice, "f" with binding point "e" in the consumer's, both at
the slice's middle so each binds to exactly its own slice): one arrow per wait, from the instruction whose signal
released it (profiler/deps.py). All producers of a wait would be ~10^5 arrows for one step; the HTML page shows
them for a clicked instruction.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler.deps import dependencies
from profiler.record import ProfileRecord
from profiler.spans import Spans

PID = 1
_EPS_US = 1e-4  # ts + dur is float arithmetic: touching slices may differ in the last bit
_PHASES_WITH_TRACK = {"X", "B", "E", "i", "I", "C", "s", "t", "f"}
_FLOW_PHASES = {"s", "t", "f"}
FLOW_NAME = "dependency"
_METADATA_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index",
                   "process_labels"}


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _operand_decoder(rec: ProfileRecord, op: int) -> Callable[[list[int]], dict[str, int]]:
    """Same result as spans.decode_operands, specialised per opcode for the hot loop."""
    names = rec.operand_names.get(op)
    if names:
        return lambda w: dict(zip(names, w[1 : 1 + len(names)]))

    def raw(w: list[int]) -> dict[str, int]:
        last = max((k for k in range(1, len(w)) if w[k]), default=0)
        return {f"w{k}": w[k] for k in range(1, last + 1)}

    return raw


def process_title(spans: Spans) -> str:
    rec = spans.record
    gpu = rec.meta.get("gpu") or rec.meta.get("backend") or "megakernel"
    title = f"{gpu} megakernel"
    return title + " (simulated)" if rec.simulated else title


def to_trace(spans: Spans) -> dict[str, Any]:
    """Trace Event Format object: {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": meta}."""
    rec = spans.record
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "args": {"name": process_title(spans)}},
        {"name": "process_sort_index", "ph": "M", "pid": PID, "args": {"sort_index": 0}},
    ]
    for r in range(spans.num_rows):
        tid = r + 1  # tid 0 is avoided: some viewers treat it as "no thread"
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                       "args": {"name": spans.row_label(r)}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                       "args": {"sort_index": r}})
    cat = "simulated" if rec.simulated else "gpu"
    # Plain-Python columns: per-element numpy scalars would dominate the cost at 10^5 events.
    idx = spans.index.tolist()
    starts, ends, rows = spans.start_ns.tolist(), spans.end_ns.tolist(), spans.row.tolist()
    words = rec.words[spans.index].tolist()
    keys = rec.work_keys[spans.index].tolist()
    sms, waits, moved = (rec.sm[spans.index].tolist(), rec.wait_ns[spans.index].tolist(),
                         rec.bytes_moved[spans.index].tolist())
    decoders = {op: _operand_decoder(rec, op) for op in rec.opcode_names}
    for j, i in enumerate(idx):
        w = words[j]
        args: dict[str, Any] = {"instr": i, "sm": sms[j], **decoders[w[0]](w), "wait_ns": waits[j]}
        if moved[j]:
            args["bytes"] = moved[j]
        events.append({"name": rec.work_names[keys[j]], "cat": cat, "ph": "X", "pid": PID, "tid": rows[j] + 1,
                       "ts": _us(starts[j]), "dur": _us(ends[j] - starts[j]), "args": args})
    events.extend(flow_events(spans))
    other = {str(k): v for k, v in rec.meta.items()}
    other.update(simulated=rec.simulated, t0_ns=spans.t0_ns)
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def flow_events(spans: Spans) -> list[dict[str, Any]]:
    """A flow per (critical producer -> consumer) pair of the record's waits."""
    producer, consumer = dependencies(spans.record).critical_edges()
    pos = np.empty(spans.index.shape[0], np.int64)
    pos[spans.index] = np.arange(spans.index.shape[0])
    mid = ((spans.start_ns + spans.end_ns) / 2).tolist()
    rows = spans.row.tolist()
    out: list[dict[str, Any]] = []
    for flow_id, (p, c) in enumerate(zip(pos[producer].tolist(), pos[consumer].tolist()), start=1):
        base = {"name": FLOW_NAME, "cat": FLOW_NAME, "id": flow_id, "pid": PID}
        out.append({**base, "ph": "s", "tid": rows[p] + 1, "ts": round(mid[p] / 1000.0, 4)})
        out.append({**base, "ph": "f", "bp": "e", "tid": rows[c] + 1, "ts": round(mid[c] / 1000.0, 4)})
    return out


def write_trace(spans: Spans, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(to_trace(spans), separators=(",", ":")))
    return path


def validate_trace(trace: Any) -> list[str]:
    """Problems with `trace` against the Trace Event Format's required fields (empty list = valid).

    Also flags partially overlapping X events on one (pid, tid) track: out of spec, and Perfetto
    moves them to an overflow track.
    """
    errors: list[str] = []
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        return ["top level must be a list of events or an object with a 'traceEvents' list"]
    tracks: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    flows: dict[Any, set[str]] = {}
    for k, ev in enumerate(events):
        where = f"traceEvents[{k}]"
        if not isinstance(ev, dict):
            errors.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        if not isinstance(ev.get("name"), str) or not isinstance(ph, str):
            errors.append(f"{where}: 'name' and 'ph' must be strings")
            continue
        if not isinstance(ev.get("pid"), int):
            errors.append(f"{where}: 'pid' must be an int")
        if ph in _PHASES_WITH_TRACK:
            if not isinstance(ev.get("tid"), int):
                errors.append(f"{where}: 'tid' must be an int")
            if not isinstance(ev.get("ts"), (int, float)):
                errors.append(f"{where}: 'ts' (µs) must be a number")
        if ph == "X":
            dur = ev.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                errors.append(f"{where}: 'dur' (µs) must be a non-negative number")
            elif isinstance(ev.get("ts"), (int, float)):
                tracks.setdefault((ev["pid"], ev.get("tid")), []).append((ev["ts"], ev["ts"] + dur))
        elif ph == "M":
            if ev["name"] not in _METADATA_NAMES:
                errors.append(f"{where}: unknown metadata event {ev['name']!r}")
            elif not isinstance(ev.get("args"), dict):
                errors.append(f"{where}: metadata needs an 'args' object")
            elif ev["name"].endswith("_name") and not isinstance(ev["args"].get("name"), str):
                errors.append(f"{where}: {ev['name']} needs args.name (str)")
            elif ev["name"].endswith("_sort_index") and not isinstance(ev["args"].get("sort_index"), int):
                errors.append(f"{where}: {ev['name']} needs args.sort_index (int)")
        if ph in _FLOW_PHASES:
            if not isinstance(ev.get("id"), (int, str)) or not isinstance(ev.get("cat"), str):
                errors.append(f"{where}: a flow event needs 'id' (int or str) and 'cat'")
            else:
                flows.setdefault((ev["cat"], ev["id"]), set()).add(ph)
        if "args" in ev and not isinstance(ev["args"], dict):
            errors.append(f"{where}: 'args' must be an object")
    for (cat, flow_id), phases in flows.items():
        if not {"s", "f"} <= phases:
            errors.append(f"flow {cat}/{flow_id}: needs both a start ('s') and a finish ('f') event")
    for (pid, tid), boxes in tracks.items():
        boxes.sort()
        open_ends: list[float] = []  # stack of enclosing slices; nesting is fine, partial overlap is not
        for s, e in boxes:
            while open_ends and open_ends[-1] <= s + _EPS_US:
                open_ends.pop()
            if open_ends and e > open_ends[-1] + _EPS_US:
                errors.append(f"track pid={pid} tid={tid}: slice at ts={s} partially overlaps another")
                break
            open_ends.append(e)
    return errors
