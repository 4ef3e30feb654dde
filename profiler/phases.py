"""Per-layer phases: how long each op holds up the layer, measured where it matters (the last SM).

A decode step is a chain of ops per layer (QKV -> attention -> O-proj -> gate/up -> down, or
QKV -> ATTN_O_PROJ -> gate/up -> down when batch-1 attention is fused with the O-proj); every op
waits for (a part of) the previous one, so the step's length is set by when the *last* instruction of
each op ends. For each opcode this reports, averaged over layers:
- `phase`: last end of this op - last end of the op before it in the layer (its share of the
  critical path; the ops of a layer partition the layer's duration);
- `ready lag`: first moment one of its instructions had its dependencies met - last end of the
  previous op (how late the op's dependency release reaches the first waiting SM);
- `exec`: mean time from dependencies met to signal (work after the wait, incl. epilogue).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.record import W_ID, W_LAYER, ProfileRecord


@dataclass(frozen=True)
class PhaseStats:
    name: str
    layers: int  # (step, layer) pairs this op appeared in
    phase_ns: float
    ready_lag_ns: float
    exec_ns: float
    exec_max_ns: float


@dataclass(frozen=True)
class LayerSpanStats:
    """How long whole layers took (last end of the layer's last op - last end of what ran before it), so a
    layer that costs more than the rest stands out: the first one pays for a launch's cold start."""
    layers: int  # layers per step
    first_ns: float  # layer 0, mean over steps
    rest_mean_ns: float  # layers 1.., mean over steps and layers
    rest_min_ns: float
    rest_max_ns: float


@dataclass(frozen=True)
class _Group:  # one (layer, opcode) group of a step, in instruction order
    layer: int
    opcode: int
    sel: np.ndarray  # its instructions
    last_end: float
    prev_end: float | None  # the group before it in the step (None for the step's first)


def _chained_groups(record: ProfileRecord) -> list[_Group]:
    """Within each step, the (layer, opcode) groups chained in instruction order. A multi-step record is its
    steps' records back to back; instruction ids restart at each step."""
    ids, layer, opcodes = record.words[:, W_ID], record.words[:, W_LAYER], record.work_keys
    step = np.concatenate([[0], np.cumsum(np.diff(ids) < 0)])
    out: list[_Group] = []
    for st in np.unique(step).tolist():
        idx = np.flatnonzero(step == st)
        groups: dict[tuple[int, int], np.ndarray] = {}
        for key in {(int(a), int(b)) for a, b in zip(layer[idx], opcodes[idx])}:
            groups[key] = idx[(layer[idx] == key[0]) & (opcodes[idx] == key[1])]
        prev_end = None
        for key in sorted(groups, key=lambda k: int(ids[groups[k]].min())):
            last_end = float(record.end_ns[groups[key]].max())
            out.append(_Group(key[0], key[1], groups[key], last_end, prev_end))
            prev_end = last_end
    return out


def _has_layers(record: ProfileRecord) -> bool:
    return record.words.shape[1] > W_LAYER and record.num_instructions > 0


def layer_phases(record: ProfileRecord) -> list[PhaseStats]:
    """Phases of the ops inside layers (layer >= 0), in the order they run; [] without layers.

    A layer's first op is measured from the previous layer's last op (or the embedding)."""
    if not _has_layers(record):
        return []
    ids, layer, opcodes = record.words[:, W_ID], record.words[:, W_LAYER], record.work_keys
    ready = record.start_ns + record.wait_ns
    exec_ns = record.end_ns - ready
    per_op: dict[int, list[tuple[float, float]]] = {}
    for grp in _chained_groups(record):
        if grp.prev_end is not None and grp.layer >= 0:
            per_op.setdefault(grp.opcode, []).append((grp.last_end - grp.prev_end,
                                                      float(ready[grp.sel].min()) - grp.prev_end))
    first_id = {o: int(ids[opcodes == o].min()) for o in per_op}
    out = []
    for o in sorted(per_op, key=lambda k: first_id[k]):
        sel = (opcodes == o) & (layer >= 0)
        vals = np.array(per_op[o])
        out.append(PhaseStats(record.work_names[int(o)], len(vals), float(vals[:, 0].mean()),
                              float(vals[:, 1].mean()), float(exec_ns[sel].mean()), float(exec_ns[sel].max())))
    return out


def layer_spans(record: ProfileRecord) -> LayerSpanStats | None:
    """Layer 0 against the others; None without layers or with a single layer."""
    if not _has_layers(record):
        return None
    first: list[float] = []
    rest: list[float] = []
    begin: float | None = None  # where the current layer started: the end of what ran before it
    groups = _chained_groups(record)
    for n, grp in enumerate(groups):
        if grp.layer < 0 or grp.prev_end is None:
            continue
        if begin is None or groups[n - 1].layer != grp.layer:
            begin = grp.prev_end
        if n + 1 == len(groups) or groups[n + 1].layer != grp.layer:  # the layer's last op
            (first if grp.layer == 0 else rest).append(grp.last_end - begin)
    if not first or not rest:
        return None
    layers = 1 + int(record.words[:, W_LAYER].max())
    return LayerSpanStats(layers, float(np.mean(first)), float(np.mean(rest)), float(min(rest)), float(max(rest)))


def render_phases(phases: list[PhaseStats]) -> list[str]:
    if not phases:
        return []
    us = lambda ns: f"{ns / 1e3:.3f}"  # noqa: E731
    w = max(6, *(len(p.name) for p in phases))
    lines = ["per-layer phases (mean over layers; phase = its share of the critical path):",
             f"{'opcode':<{w}} {'layers':>6} {'phase µs':>9} {'ready lag µs':>12} {'exec µs':>9} {'exec max':>9}"]
    for p in phases:
        lines.append(f"{p.name:<{w}} {p.layers:>6} {us(p.phase_ns):>9} {us(p.ready_lag_ns):>12} "
                     f"{us(p.exec_ns):>9} {us(p.exec_max_ns):>9}")
    return lines


def render_layer_spans(spans: LayerSpanStats | None) -> list[str]:
    if spans is None:
        return []
    us = lambda ns: f"{ns / 1e3:.1f}"  # noqa: E731
    return [f"layer spans: layer 0 {us(spans.first_ns)} µs, layers 1-{spans.layers - 1} mean {us(spans.rest_mean_ns)} "
            f"({us(spans.rest_min_ns)}..{us(spans.rest_max_ns)}) µs; the first layer costs "
            f"{us(spans.first_ns - spans.rest_mean_ns)} µs more"]
