"""ProfileRecord -> Summary: where the makespan went, as numbers and as the printed text.

Definitions (all fractions of the makespan = last end - first start over all SMs):
- busy % of an SM: length of the union of its instructions' *work* intervals (dependencies met -> signal;
  pipelined overlap counted once). Waiting on dependencies is not work, so it is left out: an SM that holds
  an instruction while its inputs are not ready is idle for this number;
- wait share: sum of wait_ns / (SMs that ran something x makespan), i.e. share of SM-time spent
  waiting on dependency counters;
- tail idle: last SM's final end - the earliest final end of any SM (first SM done -> last SM done);
- bandwidth: sum of bytes_moved / makespan (only when bytes are known).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from profiler.marks import MarkStats, mark_stats, render_marks
from profiler.phases import LayerSpanStats, PhaseStats, layer_phases, layer_spans, render_layer_spans, render_phases
from profiler.record import MetaValue, ProfileRecord


@dataclass(frozen=True)
class OpcodeStats:
    name: str
    count: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    p99_ns: float
    wait_mean_ns: float  # of the span above: waiting for dependency counters
    exec_mean_ns: float  # of the span above: dependencies met -> signal
    exec_p99_ns: float


@dataclass(frozen=True)
class Summary:
    simulated: bool
    meta: dict[str, MetaValue]
    num_instructions: int
    num_sms: int  # SMs that executed at least one instruction
    makespan_ns: int
    opcodes: list[OpcodeStats]  # by total time, largest first
    sm_busy: dict[int, float]  # SM -> fraction of the makespan spent working (dependency waits excluded)
    wait_share: float
    tail_idle_ns: int
    first_done_sm: int
    last_done_sm: int
    total_bytes: int
    bandwidth_gb_s: float | None  # None when bytes_moved is unknown (all zero)
    phases: list[PhaseStats]  # per-layer critical-path phases (profiler/phases.py)
    layer_spans: LayerSpanStats | None  # layer 0 against the rest (profiler/phases.py); None without layers
    marks: list[MarkStats]  # sub-phases inside instructions (profiler/marks.py); [] without marks

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    def text(self) -> str:
        return render_text(self)


def _union_length(start: np.ndarray, end: np.ndarray) -> int:
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    # A new disjoint block starts where a start lies past everything before it.
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e, first)
    return int((block_end - s[first]).sum())


def summarize(record: ProfileRecord) -> Summary:
    if record.num_instructions == 0:
        raise ValueError("summarize: the profile record has no instructions")
    start, end = record.start_ns, record.end_ns
    makespan = int(end.max() - start.min())
    dur = end - start
    run = dur - record.wait_ns
    ready = np.minimum(start + record.wait_ns, end)  # a wait longer than the span (bad clocks) leaves no work
    opcodes = []
    keys = record.work_keys  # an opcode's kinds apart (ProfileRecord.opcode_kinds)
    for op in np.unique(keys):
        sel = keys == op
        d, r = dur[sel], run[sel]
        opcodes.append(OpcodeStats(record.work_names[int(op)], int(d.size), int(d.sum()), float(d.mean()),
                                   float(np.percentile(d, 50)), float(np.percentile(d, 99)),
                                   float(record.wait_ns[sel].mean()), float(r.mean()), float(np.percentile(r, 99))))
    opcodes.sort(key=lambda o: (-o.total_ns, o.name))
    sms = np.unique(record.sm)
    busy, last_end = {}, {}
    for sm in sms.tolist():
        mask = record.sm == sm
        busy[sm] = _union_length(ready[mask], end[mask]) / makespan if makespan else 1.0
        last_end[sm] = int(end[mask].max())
    first_done = min(last_end, key=lambda k: (last_end[k], k))
    last_done = max(last_end, key=lambda k: (last_end[k], -k))
    total_bytes = int(record.bytes_moved.sum())
    return Summary(
        simulated=record.simulated,
        meta=dict(record.meta),
        num_instructions=record.num_instructions,
        num_sms=int(sms.size),
        makespan_ns=makespan,
        opcodes=opcodes,
        sm_busy=busy,
        wait_share=float(record.wait_ns.sum()) / (sms.size * makespan) if makespan else 0.0,
        tail_idle_ns=last_end[last_done] - last_end[first_done],
        first_done_sm=first_done,
        last_done_sm=last_done,
        total_bytes=total_bytes,
        bandwidth_gb_s=total_bytes / makespan if total_bytes and makespan else None,  # B/ns == GB/s
        phases=layer_phases(record),
        layer_spans=layer_spans(record),
        marks=mark_stats(record),
    )


def render_text(s: Summary) -> str:
    us = lambda ns: f"{ns / 1e3:.3f}"  # noqa: E731
    lines = []
    if s.simulated:
        lines.append("SIMULATED profile (VM / cost model): times are not measured GPU time")
    if s.meta:
        lines.append("  ".join(f"{k}={v}" for k, v in s.meta.items()))
    lines.append(f"{s.num_instructions} instructions on {s.num_sms} SMs, makespan {us(s.makespan_ns)} µs")
    lines.append(f"waiting on dependencies: {100 * s.wait_share:.1f}% of SM time")
    lines.append(f"tail idle: {us(s.tail_idle_ns)} µs (SM {s.first_done_sm} done first, "
                 f"SM {s.last_done_sm} last)")
    if s.bandwidth_gb_s is not None:
        lines.append(f"bandwidth: {s.bandwidth_gb_s:.1f} GB/s ({s.total_bytes / 1e6:.2f} MB moved)")
    else:
        lines.append("bandwidth: unknown (no bytes_moved in the record)")
    busy = np.array(list(s.sm_busy.values()))
    lines.append(f"SM busy (working; dependency waits excluded): mean {100 * busy.mean():.1f}%  "
                 f"min {100 * busy.min():.1f}%  max {100 * busy.max():.1f}%")
    lines.append("")
    name_w = max(6, *(len(o.name) for o in s.opcodes))
    lines.append(f"{'opcode':<{name_w}} {'count':>7} {'total µs':>11} {'share':>6} {'mean µs':>9} "
                 f"{'p50 µs':>9} {'p99 µs':>9} {'wait µs':>9} {'exec µs':>9} {'exec p99':>9}")
    all_time = sum(o.total_ns for o in s.opcodes) or 1
    for o in s.opcodes:
        lines.append(f"{o.name:<{name_w}} {o.count:>7} {us(o.total_ns):>11} {100 * o.total_ns / all_time:>5.1f}% "
                     f"{us(o.mean_ns):>9} {us(o.p50_ns):>9} {us(o.p99_ns):>9} {us(o.wait_mean_ns):>9} "
                     f"{us(o.exec_mean_ns):>9} {us(o.exec_p99_ns):>9}")
    lines.append("")
    if s.phases:
        lines.extend(render_phases(s.phases))
        lines.extend(render_layer_spans(s.layer_spans))
        lines.append("")
    if s.marks:
        lines.extend(render_marks(s.marks))
        lines.append("")
    lines.append("per-SM busy % (working, waits excluded):")
    cells = [f"SM {sm:03d} {100 * b:5.1f}" for sm, b in s.sm_busy.items()]
    lines.extend("  ".join(cells[i : i + 8]) for i in range(0, len(cells), 8))
    return "\n".join(lines) + "\n"


def write_summary(s: Summary, out_dir: str | Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    txt, js = out_dir / "summary.txt", out_dir / "summary.json"
    txt.write_text(s.text(), encoding="utf-8")
    js.write_text(s.to_json(), encoding="utf-8")
    return txt, js
