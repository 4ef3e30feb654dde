"""Balanced cuts of a range into whole units: every op's blocks (step_builder_splits.py) and attention's cuts."""
from __future__ import annotations


def partition(lo: int, hi: int, parts: int, unit: int = 1) -> list[tuple[int, int]]:
    """Cut [lo, hi) into `parts` ranges of whole `unit`s whose sizes differ by at most one unit."""
    n = (hi - lo) // unit
    if (hi - lo) % unit or not 1 <= parts <= n:
        raise ValueError(f"partition: cannot cut [{lo}, {hi}) into {parts} parts of {unit}-unit multiples")
    cuts = [lo + (k * n // parts) * unit for k in range(parts + 1)]
    return [(cuts[k], cuts[k + 1]) for k in range(parts)]
