"""The engine's host seconds per kind of step (engine/step_times.py), which /metrics exports: a run of decode steps,
a step with prompt tokens, a single decode step, and the time between steps while requests are in flight."""
from __future__ import annotations

from engine import LLM, SamplingParams
from engine.step_times import STEP_KINDS, StepClock


def test_generate_counts_prefill_and_run_steps(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=64, decode_steps=8)
    llm.generate([[5, 6, 7], [8, 9]], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    times = llm.engine.get_stats().step_times
    assert times is not None and set(times.steps) == set(STEP_KINDS)
    assert times.steps["prefill"] >= 1 and times.tokens["prefill"] == 5
    assert times.steps["run"] >= 1 and times.tokens["run"] > 0
    assert all(seconds >= 0 for seconds in times.seconds.values()) and times.seconds["run"] > 0
    assert times.tokens["run"] + times.tokens["decode"] + 2 >= 24  # every token after the prefill's first two


def test_between_counts_only_while_requests_are_in_flight() -> None:
    clock = StepClock()
    clock.step_begins()
    clock.step_ends("prefill", 4, busy=True)
    clock.step_begins()  # closes a "between" interval
    clock.step_ends("decode", 1, busy=False)
    clock.step_begins()  # nothing was in flight: no interval
    clock.step_ends("decode", 1, busy=True)
    totals = clock.totals()
    assert totals.steps == {"run": 0, "decode": 2, "prefill": 1, "between": 1}
    assert totals.tokens["prefill"] == 4 and totals.tokens["between"] == 0
