"""render_all: every profiler artifact for one ProfileRecord, written into one directory."""
from __future__ import annotations

from pathlib import Path

from profiler.html import write_html
from profiler.png import render_png
from profiler.record import ProfileRecord, save_npz
from profiler.spans import to_spans
from profiler.summary import Summary, summarize, write_summary
from profiler.trace import write_trace

ARTIFACTS = ("raw.npz", "trace.json", "gantt.html", "gantt.png", "summary.txt", "summary.json")


def render_all(record: ProfileRecord, out_dir: str | Path, *, save_raw: bool = True) -> Summary:
    """Write raw.npz (unless re-rendering it in place), trace.json, gantt.html, gantt.png, summary.*"""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(record)  # first: it rejects an empty record before any file is written
    if save_raw:
        save_npz(record, out / "raw.npz")
    spans = to_spans(record)
    write_trace(spans, out / "trace.json")
    write_html(spans, out / "gantt.html")
    render_png(spans, out / "gantt.png")
    write_summary(summary, out)
    return summary
