"""Spans -> gantt.png: a static matplotlib overview (a band per SM, split into sub-lanes).

Uses the object-oriented Figure + Agg canvas, not pyplot, so no global backend or figure state.
Adjacent same-opcode spans closer than one pixel are merged first: the picture is identical and
10^5 instructions render in about a second. The part of a box spent waiting on dependencies is painted over
in a lighter tint of its colour (as in gantt.html), so waiting never reads as work.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch

from profiler.colors import opcode_colors
from profiler.spans import Spans

WIDTH_PX = 1600
DPI = 100
WAIT_TINT = 0.35  # a waiting part's colour: this much of the opcode colour over white


def tint(rgba: tuple[float, ...], amount: float = WAIT_TINT) -> tuple[float, ...]:
    return (*(amount * c + (1 - amount) for c in rgba[:3]), 1.0)


def _quads(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> np.ndarray:
    return np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1), np.stack([x1, y1], 1),
                     np.stack([x1, y0], 1)], axis=1)


def merge_subpixel(start: np.ndarray, end: np.ndarray, op: np.ndarray, eps: float) -> tuple[np.ndarray, ...]:
    """Merge runs of same-opcode spans (sorted by start, one row) whose gaps are below `eps`."""
    if start.size == 0:
        return start, end, op
    new = np.ones(start.size, bool)
    new[1:] = (op[1:] != op[:-1]) | (start[1:] - end[:-1] > eps)
    first = np.flatnonzero(new)
    merged_end = np.maximum.reduceat(end, first)
    return start[first], merged_end, op[first]


def render_png(spans: Spans, path: str | Path) -> Path:
    path = Path(path)
    rec = spans.record
    colors = opcode_colors(rec.work_names)
    rows = spans.num_rows
    # One band per SM (like the HTML page); an SM's sub-lanes split its band.
    sms, band, lanes = np.unique(spans.row_sm, return_inverse=True, return_counts=True)
    height_in = min(24.0, 1.6 + 0.28 * max(sms.size, 1))
    fig = Figure(figsize=(WIDTH_PX / DPI, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    makespan_us = max(float(spans.end_ns.max()) / 1e3, 1e-3) if spans.end_ns.size else 1.0
    eps_us = makespan_us / WIDTH_PX
    bounds = np.searchsorted(spans.row, np.arange(rows + 1))
    opcodes = rec.work_keys[spans.index]  # an opcode's kinds apart (ProfileRecord.opcode_kinds)
    boxes: list[np.ndarray] = []  # [x0, x1, y0, y1] per (merged) span
    box_ops: list[np.ndarray] = []
    wait_boxes: list[np.ndarray] = []  # the waiting part of spans whose wait is at least a pixel wide
    wait_ops: list[np.ndarray] = []
    wait_us = np.minimum(rec.wait_ns[spans.index], spans.end_ns - spans.start_ns) / 1e3
    for r in range(rows):
        a, b = bounds[r], bounds[r + 1]
        s, e, op = merge_subpixel(spans.start_ns[a:b] / 1e3, spans.end_ns[a:b] / 1e3, opcodes[a:b], eps_us)
        lane_h = 0.8 / lanes[band[r]]
        y0 = band[r] - 0.4 + spans.row_lane[r] * lane_h
        e = np.maximum(e, s + eps_us * 0.5)  # keep zero-length instructions visible
        boxes.append(np.stack([s, e, np.full_like(s, y0), np.full_like(s, y0 + 0.9 * lane_h)], axis=1))
        box_ops.append(op)
        ws, ww = spans.start_ns[a:b] / 1e3, wait_us[a:b]
        keep = ww >= eps_us
        ws, ww = ws[keep], ww[keep]
        wait_boxes.append(np.stack([ws, ws + ww, np.full_like(ws, y0), np.full_like(ws, y0 + 0.9 * lane_h)], axis=1))
        wait_ops.append(opcodes[a:b][keep])
    # One PolyCollection for everything (what broken_barh builds per call, minus 10^3 calls' overhead).
    x0, x1, y0, y1 = np.concatenate(boxes).T if boxes else np.zeros((4, 0))
    palette = {op: to_rgba(c) for op, c in colors.items()}
    face = [palette[int(o)] for o in np.concatenate(box_ops)] if box_ops else []
    ax.add_collection(PolyCollection(_quads(x0, x1, y0, y1), facecolors=face, linewidths=0, antialiased=False),
                      autolim=False)
    wx0, wx1, wy0, wy1 = np.concatenate(wait_boxes).T if wait_boxes else np.zeros((4, 0))
    light = {op: tint(c) for op, c in palette.items()}
    wface = [light[int(o)] for o in np.concatenate(wait_ops)] if wait_ops else []
    ax.add_collection(PolyCollection(_quads(wx0, wx1, wy0, wy1), facecolors=wface, linewidths=0,
                                     antialiased=False), autolim=False)
    ax.set_ylim(sms.size - 0.5, -0.5)  # SM 0 on top, like the HTML page and Perfetto
    step = max(1, sms.size // 40)
    ax.set_yticks(range(0, sms.size, step), [f"SM {int(sm):03d}" for sm in sms[::step]], fontsize=7)
    ax.set_xlim(0, makespan_us)
    ax.set_xlabel("time since first instruction start (µs)" + (" — SIMULATED" if rec.simulated else ""))
    title = f"{rec.meta.get('model', 'megakernel')} per-SM Gantt, makespan {makespan_us:.3f} µs"
    ax.set_title(("SIMULATED (VM / cost model): " if rec.simulated else "") + title,
                 color="#c62828" if rec.simulated else "black", fontsize=11)
    present = sorted(set(np.unique(opcodes).tolist()))
    handles = [Patch(facecolor=colors[o], label=rec.work_names[o]) for o in present]
    if present:
        handles.append(Patch(facecolor=tint(to_rgba(colors[present[0]])), label="lighter: waiting"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    # Fixed margins instead of tight_layout: one draw instead of two (matters at 10^5 boxes).
    left_in, right_in = 0.8, 1.9
    fig.subplots_adjust(left=left_in / fig.get_figwidth(), right=1 - right_in / fig.get_figwidth(),
                        top=1 - 0.35 / height_in, bottom=0.55 / height_in)
    fig.savefig(path, dpi=DPI)
    return path
