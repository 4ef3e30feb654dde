"""Query units: a step's attention instructions dealt out over its sequences by their attention work, at run time.

A stream is compiled for a step's token and sequence counts, not for which of its sequences bring a prompt chunk
and which one decode token, and a server's steps mix both (a 128-token prompt chunk beside 31 decodes). Cut
uniformly, each sequence's tokens get the same q_parts instructions per KV group: one (the step's T // S tokens per
sequence are few), so the prompt chunk's attention ran as one instruction per group, 70 us on the layer's critical
path while the decodes beside it took 13 (1B, H200, `megakernel profile --prompt-lens 128x8 --chunk 128
--decode-lens 200x32`). A stream of "spread" ATTN_PARTIALs has U >= S of them per (KV group, head range), the
one with q_part = j and q_parts = U being unit j, and the host writes with each step's args where each sequence's
units start (`unit_starts`): every sequence gets one, and the rest go to the sequences with more than one token, in proportion
to (tokens - 1) x context (the extra queries times the keys they attend to), at most one per MIN_TOKENS_PER_UNIT of
them. Units past the last sequence's do nothing. The device's controller resolves a unit to its (seq, part, parts)
when it fetches the instruction (csrc/interpreter/query_units.cuh); the VM does the same here (`resolve`).
Only streams without KV splits spread (a split sequence's partials meet in its own ATTN_REDUCE).
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

MIN_TOKENS_PER_UNIT = 4  # a unit's fewest tokens (also the scheduler's floor for query parts: attention_cuts.py)

T = TypeVar("T")


def unit_starts(query_start: Sequence[int], context_lens: Sequence[int], units: int) -> list[int]:
    """Where each sequence's units start (S + 1 values, the last one where the units with no work begin) when the
    step's `units` units (>= S) are dealt out; `units` == S: one each (the identity). Vectorised: the host writes it
    with every step's args."""
    S = len(context_lens)
    if units <= S:
        return list(range(S + 1))
    qs, ctx = np.asarray(query_start, dtype=np.int64), np.asarray(context_lens, dtype=np.int64)
    n = np.minimum(np.diff(qs), ctx)  # live tokens only (StepArgsView.live_end): a padded step's last dummy has one
    work = (n - 1) * ctx
    total = int(work.sum())
    parts = 1 + ((units - S) * work // total if total > 0 else 0)
    parts = np.minimum(parts, np.maximum(1, n // MIN_TOKENS_PER_UNIT))
    return [0, *np.cumsum(parts).tolist()]


def unit_of(starts: Sequence[int], unit: int) -> tuple[int, int, int] | None:
    """(seq, part, parts) of `unit` under `starts`, None for a unit with no work."""
    if unit >= starts[-1]:
        return None
    s = bisect.bisect_right(starts, unit) - 1
    return s, unit - starts[s], starts[s + 1] - starts[s]


def resolve(task: T, starts: Sequence[int]) -> T | None:
    """A spread ATTN_PARTIAL (its `spread` operand set) as the plain one its unit names, None when it has no work;
    any other task as it is."""
    if not getattr(task, "spread", 0):
        return task
    found = unit_of(starts, task.q_part)  # type: ignore[attr-defined]
    if found is None:
        return None
    seq, part, parts = found
    return replace(task, seq=seq, q_part=part, q_parts=parts, spread=0)  # type: ignore[type-var]
