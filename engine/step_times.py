"""Where an engine's wall-clock time goes, step by step: the host's seconds in each kind of engine step and between
steps while requests are in flight. Against the decode runs' device seconds (engine/run_times.py) it says
what a server's time per token is made of: `run` steps (several decode steps on the device, their host work
overlapped), single `decode` steps, steps with prompt tokens (`prefill`: chunked prefill, alone or mixed with
decodes), and `between` (the engine thread's own work between steps: admitting requests, handing outputs over).
With async scheduling the look-ahead's own overlapped single steps (engine/lookahead.py) are not counted; the plans it
hands to the engine's ordinary path are."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

STEP_KINDS = ("run", "decode", "prefill", "between")


@dataclass(frozen=True)
class StepTimes:
    """Cumulative per kind: engine steps, host wall seconds, and tokens they processed (prompt tokens for
    `prefill`, decode steps x sequences at the run's start for `run`, sampled tokens for `decode`; `between` counts
    intervals and no tokens)."""

    steps: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEP_KINDS, 0))
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEP_KINDS, 0.0))
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEP_KINDS, 0))


class StepClock:
    """Accumulates StepTimes for one engine: `step_begins` when a step starts (it closes the interval since the
    previous step's end, if requests were in flight then), `step_ends(kind, tokens, busy)` when it returns."""

    def __init__(self) -> None:
        self._steps = dict.fromkeys(STEP_KINDS, 0)
        self._seconds = dict.fromkeys(STEP_KINDS, 0.0)
        self._tokens = dict.fromkeys(STEP_KINDS, 0)
        self._begin = 0.0
        self._last_end: float | None = None  # None: no request was in flight at the last step's end

    def step_begins(self) -> None:
        self._begin = time.perf_counter()
        if self._last_end is not None:
            self._add("between", self._begin - self._last_end, 0)

    def step_ends(self, kind: str, tokens: int, busy: bool) -> None:
        """`busy`: requests are still in flight (the time until the next step counts as `between`)."""
        end = time.perf_counter()
        self._add(kind, end - self._begin, tokens)
        self._last_end = end if busy else None

    def _add(self, kind: str, seconds: float, tokens: int) -> None:
        self._steps[kind] += 1
        self._seconds[kind] += seconds
        self._tokens[kind] += tokens

    def totals(self) -> StepTimes:
        return StepTimes(steps=dict(self._steps), seconds=dict(self._seconds), tokens=dict(self._tokens))
