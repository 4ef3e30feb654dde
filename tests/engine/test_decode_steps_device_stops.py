"""Runs of decode steps with the device's stop rules (engine/run_stops.py) on the CPU: the engine hands every run
its rows' rules, and a backend that ends a run where those rules say every row stopped (as the cuda backend's
skipped launches do: their records are never handed over) changes no output. The backend here is the torch one,
wrapped to act on the rules the way the GPU does."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from engine import LLM, SamplingParams
from engine.backends.base import OnRecords
from engine.run_stops import RowStop, RunStops
from engine.sampling.run_sampler import Records, RunSampler
from models.llama.step_batch import StepBatch

PROMPTS = ["Hello there", "The quick brown fox jumps", "a", "Numbers: 1 2 3 4 5 6 7"]
DecodeSteps = Callable[..., int]


def _llm(checkpoint: str, decode_steps: int) -> LLM:
    return LLM(checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=4,
               decode_steps=decode_steps, num_pages=64)


def _outputs(llm: LLM, params: list[SamplingParams]) -> list[tuple[list[int], str, str | None, object]]:
    return [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason, o.outputs[0].stop_reason)
            for o in llm.generate(PROMPTS, params)]


def _device_stopping(original: DecodeSteps, runs: list[tuple[RunStops, int | None, int | None]]) -> DecodeSteps:
    """`original` (one step per on_records call) cut where `stops` says every row stopped: no later step is handed
    over, as on the GPU. Records per run (its rules, the step the device stopped at, the step at which the host
    ended the run)."""

    def decode_steps(batch: StepBatch, steps: int, page_size: int, on_records: OnRecords,
                     sampler: RunSampler | None = None, stops: RunStops | None = None) -> int:
        assert stops is not None and len(stops.rows) == batch.num_seqs
        seen: list[list[int]] = []
        host_end: int | None = None

        def take(records: Records) -> bool:
            nonlocal host_end
            assert records["ids"].shape[0] == 1
            seen.append(records["ids"][0].tolist())
            go_on = on_records(records)
            if not go_on and host_end is None:
                host_end = len(seen) - 1
            device_end = stops.stopped_at(seen)
            if device_end is not None:
                assert device_end == len(seen) - 1  # nothing past the device's stop was handed over
                runs.append((stops, device_end, host_end))
                return False
            if not go_on:
                runs.append((stops, None, host_end))
            return go_on

        return original(batch, steps, page_size, take, sampler, stops)

    return decode_steps


def _first_new(ids: list[int], at: int) -> list[int]:
    """The first token at index `at` or later that does not occur before it (as a stop id list; none if none)."""
    return next(([t] for i, t in enumerate(ids) if i >= at and t not in ids[:i]), [])


@pytest.mark.parametrize("sampled", [False, True])
def test_the_device_rules_stop_no_row_the_host_runs_on(tiny_checkpoint: str, sampled: bool) -> None:
    """Where the device sees the last row of a run stop, the host has ended the run at that very step (no stop
    strings, no seat wanted: the device rules are then exactly the host's), and the outputs are those of one step
    at a time. Stops inside runs: a stop id (with EOS), EOS alone, a length limit, a stop id with EOS ignored."""
    base = SamplingParams(temperature=0.9, seed=5) if sampled else SamplingParams(temperature=0.0)
    one = _llm(tiny_checkpoint, 1)
    free = [ids for ids, *_ in _outputs(one, [dataclasses.replace(base, max_tokens=40, ignore_eos=True)] * 4)]
    params = [dataclasses.replace(base, max_tokens=40, stop_token_ids=_first_new(free[0], 9)),
              dataclasses.replace(base, max_tokens=40),
              dataclasses.replace(base, max_tokens=5),
              dataclasses.replace(base, max_tokens=27, ignore_eos=True, stop_token_ids=_first_new(free[3], 20))]
    want = _outputs(one, params)
    many = _llm(tiny_checkpoint, 8)
    runs: list[tuple[RunStops, int | None, int | None]] = []
    backend = many.engine.backend
    backend.decode_steps = _device_stopping(backend.decode_steps, runs)  # type: ignore[method-assign]
    assert _outputs(many, params) == want
    assert runs and any(device is not None for _s, device, _h in runs)
    for _stops, device, host in runs:
        if device is not None:
            assert host == device
    assert many.engine.get_stats().kv_pages_used == 0


def test_a_run_the_device_ends_early_leaves_running_rows_to_the_next_step(tiny_checkpoint: str) -> None:
    """Rules stricter than the host's (a budget of 2 tokens per run): the backend ends each run there while the
    host still runs its rows, and those go on in the next engine step with the same outputs."""
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (3, 11, 17, 9)]
    want = _outputs(_llm(tiny_checkpoint, 1), params)
    many = _llm(tiny_checkpoint, 8)
    runs: list[tuple[RunStops, int | None, int | None]] = []
    backend = many.engine.backend
    backend.decode_steps = _device_stopping(backend.decode_steps, runs)  # type: ignore[method-assign]
    host_rules = many.engine._runs.stops_for
    many.engine._runs.stops_for = lambda chunks: RunStops(  # type: ignore[method-assign]
        tuple(RowStop(r.stop_ids, min(r.budget, 2), r.min_count) for r in host_rules(chunks).rows))
    assert _outputs(many, params) == want
    assert runs and all(device == 1 for _s, device, _h in runs)  # each run cut after its 2nd step
    assert many.engine.get_stats().kv_pages_used == 0


def test_each_run_gets_its_rows_rules(tiny_checkpoint: str) -> None:
    """The rules match each row's request: EOS unless ignore_eos, its stop ids, and its length left."""
    many = _llm(tiny_checkpoint, 8)
    eos = many.engine.config.eos_token_ids
    seen: list[RunStops] = []
    original = many.engine.backend.decode_steps

    def spy(batch: StepBatch, steps: int, page_size: int, on_records: OnRecords,
            sampler: RunSampler | None = None, stops: RunStops | None = None) -> int:
        assert stops is not None
        seen.append(stops)
        return original(batch, steps, page_size, on_records, sampler, stops)

    many.engine.backend.decode_steps = spy  # type: ignore[method-assign]
    many.generate(PROMPTS[:2], [SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[3]),
                                SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)])
    first = seen[0]
    assert first.rows[0].stop_ids == (*eos, 3) and first.rows[1].stop_ids == ()
    # after the prefill step's token, 11 are left of max_tokens (the context is far larger)
    assert [r.budget for r in first.rows] == [11, 11]
    assert all(r.min_count <= 0 for r in first.rows)
