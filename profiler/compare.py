"""Two profiles side by side (`megakernel profile --compare A B`): what changed, in text and as one page.

compare.txt: makespan, waiting, busy and tail idle of A and B with B - A; per opcode the count, the total
span time and the mean work (exec) time with their deltas, largest change first; per-layer phases when both
have them. compare.html: both Gantts on one page under one time axis (each from its own first start), so
the same width means the same time in both.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from profiler.html import render_panels
from profiler.record import ProfileRecord
from profiler.spans import to_spans
from profiler.summary import OpcodeStats, Summary, summarize

COMPARE_ARTIFACTS = ("compare.txt", "compare.html")


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:.3f}"


def _delta(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{(b - a) / 1e3:+.3f}"


def _pct(a: float, b: float) -> str:
    return f"{100 * (b - a) / a:+.1f}%" if a else "-"


def _mean_busy(s: Summary) -> float:
    return float(np.mean(list(s.sm_busy.values())))


def compare_text(a: Summary, b: Summary, label_a: str, label_b: str) -> str:
    lines = [f"A: {label_a}" + ("  (SIMULATED)" if a.simulated else ""),
             f"B: {label_b}" + ("  (SIMULATED)" if b.simulated else ""),
             f"makespan: A {_us(a.makespan_ns)} µs  B {_us(b.makespan_ns)} µs  "
             f"B-A {_delta(a.makespan_ns, b.makespan_ns)} µs ({_pct(a.makespan_ns, b.makespan_ns)})",
             f"instructions: A {a.num_instructions} on {a.num_sms} SMs  B {b.num_instructions} on {b.num_sms} SMs",
             f"waiting on dependencies: A {100 * a.wait_share:.1f}%  B {100 * b.wait_share:.1f}% of SM time",
             f"SM busy (working) mean: A {100 * _mean_busy(a):.1f}%  B {100 * _mean_busy(b):.1f}%",
             f"tail idle: A {_us(a.tail_idle_ns)} µs  B {_us(b.tail_idle_ns)} µs", ""]
    ops_a: dict[str, OpcodeStats] = {o.name: o for o in a.opcodes}
    ops_b: dict[str, OpcodeStats] = {o.name: o for o in b.opcodes}
    total = lambda ops, n: ops[n].total_ns if n in ops else 0  # noqa: E731
    names = sorted(set(ops_a) | set(ops_b), key=lambda n: (-abs(total(ops_b, n) - total(ops_a, n)), n))
    w = max(6, *(len(n) for n in names)) if names else 6
    lines.append("per opcode (total: sum of spans, waits included; exec: mean work per instruction; B-A):")
    lines.append(f"{'opcode':<{w}} {'count A':>8} {'count B':>8} {'total A µs':>11} {'total B µs':>11} "
                 f"{'B-A µs':>10} {'exec A µs':>10} {'exec B µs':>10} {'B-A µs':>9}")
    for n in names:
        oa, ob = ops_a.get(n), ops_b.get(n)
        ta, tb = (oa.total_ns if oa else None), (ob.total_ns if ob else None)
        ea, eb = (oa.exec_mean_ns if oa else None), (ob.exec_mean_ns if ob else None)
        lines.append(f"{n:<{w}} {oa.count if oa else '-':>8} {ob.count if ob else '-':>8} {_us(ta):>11} "
                     f"{_us(tb):>11} {_delta(ta or 0, tb or 0):>10} {_us(ea):>10} {_us(eb):>10} "
                     f"{_delta(ea, eb):>9}")
    phases_a, phases_b = {p.name: p for p in a.phases}, {p.name: p for p in b.phases}
    shared = [p.name for p in a.phases if p.name in phases_b]
    if shared:
        lines += ["", "per-layer phases (mean µs over layers; the critical path by op):",
                  f"{'opcode':<{w}} {'phase A':>9} {'phase B':>9} {'B-A':>9}"]
        for n in shared:
            pa, pb = phases_a[n].phase_ns, phases_b[n].phase_ns
            lines.append(f"{n:<{w}} {_us(pa):>9} {_us(pb):>9} {_delta(pa, pb):>9}")
    return "\n".join(lines) + "\n"


def write_compare(a: ProfileRecord, b: ProfileRecord, label_a: str, label_b: str, out_dir: str | Path) -> str:
    """Write compare.txt and compare.html into `out_dir`; returns the text."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = compare_text(summarize(a), summarize(b), label_a, label_b)
    (out / "compare.txt").write_text(text, encoding="utf-8")
    page = render_panels([(f"A: {label_a}", to_spans(a)), (f"B: {label_b}", to_spans(b))],
                         title=f"compare: A {label_a} · B {label_b}")
    (out / "compare.html").write_text(page, encoding="utf-8")
    return text
