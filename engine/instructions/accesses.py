"""The vocabulary of buffer regions an instruction reads and writes, for the VM's race detector (each
opcode module of engine/instructions/ops declares its own regions with it).

A region is a union of products; a product gives, per buffer dimension, a sorted list of disjoint
(lo, hi) runs (so a prefill's thousands of KV slots stay a handful of runs). KV caches are indexed
(layer, slot = page * page_size + row, kv_head, dim). Kinds: "r" read, "w" plain write, "acc"
accumulating write (commutes with other "acc" to the same place, conflicts with "r" and "w").
Regions that depend on step args (KV slots, a sequence's tokens) are computed from the live args,
exactly as the interpreter computes its addresses. Weights are read-only and not tracked.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Runs = tuple[tuple[int, int], ...]
Box = tuple[Runs, ...]  # one run list per dimension


@dataclass(frozen=True)
class Access:
    buffer: str
    kind: str  # "r" | "w" | "acc"
    boxes: tuple[Box, ...]


def box(*dims: tuple[int, int] | list[tuple[int, int]]) -> Box:
    """A product region; each dim is one (lo, hi) range or a list of runs."""
    return tuple(tuple(d) if isinstance(d, list) else (d,) for d in dims)


def runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Sorted distinct ints -> maximal [lo, hi) runs."""
    v = np.unique(values)
    if v.size == 0:
        return []
    breaks = np.nonzero(np.diff(v) != 1)[0]
    starts = np.concatenate(([v[0]], v[breaks + 1]))
    ends = np.concatenate((v[breaks], [v[-1]])) + 1
    return [(int(a), int(b)) for a, b in zip(starts, ends)]
