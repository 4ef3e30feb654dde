"""Several greedy decode steps per engine step (EngineConfig.decode_steps): the outputs, the streamed order and
the KV bookkeeping are exactly those of one step at a time, whatever stops a sequence mid-run."""
from __future__ import annotations

import random

import pytest
import torch

from engine import LLM, LLMEngine, SamplingParams
from engine.backends.base import Backend
from models.llama.step_batch import StepBatch

PROMPTS = ["Hello there", "The quick brown fox jumps", "a", "Numbers: 1 2 3 4 5 6 7"]


def _engine(checkpoint: str, backend: str, decode_steps: int) -> LLM:
    # Without look-ahead, so each engine.step() below is the step or run it names (look-ahead runs the same runs,
    # a step later: tests/engine/test_async_scheduling.py compares the two engines' streams).
    return LLM(checkpoint, backend=backend, dtype="float32", progress=False, max_num_seqs=4,
               decode_steps=decode_steps, num_pages=64, async_scheduling=False)


def _texts(llm: LLM, params: list[SamplingParams]) -> list[tuple[list[int], str, str | None, object]]:
    outs = llm.generate(PROMPTS, params)
    return [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason, o.outputs[0].stop_reason)
            for o in outs]


@pytest.mark.parametrize("backend", ["torch", "vm"])
def test_runs_of_decode_steps_equal_one_step_at_a_time(tiny_checkpoint: str, backend: str) -> None:
    one = _engine(tiny_checkpoint, backend, 1)
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (1, 7, 20, 33)]
    want = _texts(one, params)
    # Stops that fall inside a run: a stop token and a stop string taken from the one-step output.
    ids = want[3][0]
    stops = [SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=[ids[9]]),
             SamplingParams(temperature=0.0, max_tokens=40, stop=[want[3][1][5:9]] if len(want[3][1]) > 9 else None),
             SamplingParams(temperature=0.0, max_tokens=5),
             SamplingParams(temperature=0.0, max_tokens=40)]
    want_stops = _texts(one, stops)
    many = _engine(tiny_checkpoint, backend, 8)
    assert _texts(many, params) == want
    assert _texts(many, stops) == want_stops
    stats = many.engine.get_stats()
    assert stats.kv_pages_used == 0 and not many.engine.has_unfinished_requests()


def test_streamed_outputs_grow_token_by_token(tiny_checkpoint: str) -> None:
    llm = _engine(tiny_checkpoint, "torch", 8)
    engine: LLMEngine = llm.engine
    engine.add_request("r", "Hello there", SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    seen: list[int] = []
    calls = 0
    while engine.has_unfinished_requests():
        calls += 1
        for out in engine.step():
            ids = out.outputs[0].token_ids
            assert len(ids) == len(seen) + 1 and ids[:-1] == seen  # one more token each, in order
            seen = list(ids)
    assert len(seen) == 12
    # Prefill, then one run of 8 decode steps, then the 3 left: 3 engine steps for 12 device steps.
    assert calls == 3 and engine.get_stats().steps == 12


@pytest.mark.parametrize("backend", ["torch", "vm"])
def test_sampled_runs_equal_one_step_at_a_time(tiny_checkpoint: str, backend: str) -> None:
    """Seeded sampling, filters, penalties and logprobs in runs of decode steps (sampled on the logits' device):
    the same tokens, text and logprobs as step by step, because the noise is counted per request."""
    params = [SamplingParams(temperature=0.9, seed=3, max_tokens=13, ignore_eos=True),
              SamplingParams(temperature=1.2, top_p=0.8, top_k=20, min_p=0.02, seed=-5, max_tokens=17,
                             ignore_eos=True, logprobs=3),
              SamplingParams(temperature=0.0, max_tokens=11, ignore_eos=True, repetition_penalty=1.3,
                             frequency_penalty=0.4, presence_penalty=0.2),
              SamplingParams(temperature=0.7, seed=2**64 - 1, max_tokens=9, frequency_penalty=-0.5, logprobs=0)]

    def run(decode_steps: int) -> list[tuple[object, ...]]:
        outs = _engine(tiny_checkpoint, backend, decode_steps).generate(PROMPTS, params)
        return [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].logprobs) for o in outs]

    one, many = run(1), run(8)
    for (ids1, text1, lp1), (ids8, text8, lp8) in zip(one, many):
        assert ids1 == ids8 and text1 == text8
        assert (lp1 is None) == (lp8 is None)
        for a, b in zip(lp1 or [], lp8 or []):
            assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-6 for k in a)


def test_a_waiting_request_ends_a_run_early(tiny_checkpoint: str) -> None:
    """A request arriving while seats are free waits for at most the backend's look-ahead, not a whole run."""
    llm = _engine(tiny_checkpoint, "torch", 16)
    engine = llm.engine
    engine.add_request("long", "Hello there", SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    engine.step()  # prefill
    ran: list[int] = []
    original = engine.backend.decode_steps

    def spy(batch: StepBatch, steps: int, page_size: int, on_records, sampler=None, stops=None) -> int:  # noqa: ANN001
        def arrive_then_take(records):  # noqa: ANN001, ANN202
            if "late" not in engine._requests:
                engine.add_request("late", "a", SamplingParams(temperature=0.0, max_tokens=2))
            return on_records(records)
        ran.append(original(batch, steps, page_size, arrive_then_take, sampler, stops))
        return ran[-1]

    engine.backend.decode_steps = spy  # type: ignore[method-assign]
    engine.step()
    assert ran == [1]  # the torch backend hands back every step: the run ends at the first
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.get_stats().kv_pages_used == 0


def test_a_request_on_its_way_ends_a_run_early(tiny_checkpoint: str) -> None:
    """A request the engine's owner has queued but not added yet (a server's queue, drained between steps:
    LLMEngine.arrivals_waiting) ends a run as a waiting one does while a seat is free; nothing queued, or every seat
    taken, and the run goes on."""
    llm = _engine(tiny_checkpoint, "torch", 16)
    engine = llm.engine
    engine.add_request("long", "Hello there", SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    engine.step()  # prefill
    queued = [False]
    calls = [0]

    def arrivals() -> bool:  # the request is queued once the run has started
        calls[0] += 1
        return queued[0] or calls[0] > 1

    engine.arrivals_waiting = arrivals
    engine.step()
    assert engine._runs.last_run_steps == 1
    engine.arrivals_waiting = lambda: False
    engine.step()
    assert engine._runs.last_run_steps == 16
    full = _engine(tiny_checkpoint, "torch", 16).engine  # every seat taken: a queued request cannot start anyway
    for i in range(4):
        full.add_request(f"r{i}", "Hello there", SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    full.step()
    full.arrivals_waiting = lambda: True
    full.step()
    assert full._runs.last_run_steps == 16


def test_base_decode_steps_feeds_each_id_back(tiny_checkpoint: str) -> None:
    """The backend-level contract, on a fake backend: step j+1's token is step j's id, one position further."""
    seen: list[tuple[list[int], list[int], list[int]]] = []

    class Echo(Backend):
        def forward(self, batch: StepBatch) -> torch.Tensor:
            raise AssertionError("greedy is overridden")

        def greedy(self, batch: StepBatch) -> torch.Tensor:
            seen.append((batch.token_ids.tolist(), batch.positions.tolist(), batch.context_lens.tolist()))
            return batch.token_ids + 100

    rng = random.Random()
    first = [rng.randrange(50) for _ in range(3)]
    starts = [rng.randrange(40) for _ in range(3)]
    batch = StepBatch.build([[t] for t in first], starts, [list(range(s * 8, s * 8 + 8)) for s in range(3)],
                            page_size=16)
    handed: list[list[int]] = []

    def take(records) -> bool:  # noqa: ANN001
        handed.extend(records["ids"].tolist())
        return True

    assert Echo().decode_steps(batch, 4, page_size=16, on_records=take) == 4
    assert [[t + 100 * (j + 1) for t in first] for j in range(4)] == handed
    assert [p for _t, p, _c in seen] == [[s + j for s in starts] for j in range(4)]
    assert [c for _t, _p, c in seen] == [[s + j + 1 for s in starts] for j in range(4)]
    with pytest.raises(ValueError, match="needs a page"):
        short = StepBatch.build([[1]], [15], [[0]], page_size=16)
        Echo().decode_steps(short, 2, page_size=16, on_records=lambda records: True)


def test_output_sink_gets_each_chunk_of_a_run(tiny_checkpoint: str) -> None:
    """With a sink (the server's), a run's outputs go there as its tokens come back; step() returns the rest."""
    llm = _engine(tiny_checkpoint, "torch", 8)
    engine: LLMEngine = llm.engine
    sunk: list[list[int]] = []
    engine.output_sink = lambda outs: sunk.extend(list(o.outputs[0].token_ids) for o in outs)
    engine.add_request("r", "Hello there", SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    returned: list[list[int]] = []
    while engine.has_unfinished_requests():
        returned.extend(list(o.outputs[0].token_ids) for o in engine.step())
    assert [len(ids) for ids in returned] == [1]  # the prefill step's token
    assert [len(ids) for ids in sunk] == list(range(2, 13))  # the runs' tokens, one output each, in order


def test_runs_go_on_while_requests_wait_for_a_full_house(tiny_checkpoint: str) -> None:
    """With every seat taken a waiting request cannot be admitted before a running one finishes: the running
    ones still get runs, and the outputs equal one step at a time."""
    prompts = ["a b c", "d e", "f", "g h i j"]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (9, 14, 5, 11)]
    want = [o.outputs[0].token_ids for o in
            LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=2, decode_steps=1,
                num_pages=64).generate(prompts, params)]
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=2, decode_steps=8,
              num_pages=64)
    waiting_at_runs: list[int] = []
    original = llm.engine.backend.decode_steps

    def spy(batch: StepBatch, steps: int, page_size: int, on_records, sampler=None, stops=None) -> int:  # noqa: ANN001
        if steps > 1:
            waiting_at_runs.append(llm.engine.scheduler.num_waiting)
        return original(batch, steps, page_size, on_records, sampler, stops)

    llm.engine.backend.decode_steps = spy  # type: ignore[method-assign]
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
    assert waiting_at_runs and max(waiting_at_runs) > 0  # runs while requests waited for a seat
    assert llm.engine.get_stats().kv_pages_used == 0


def test_a_cache_too_full_for_a_whole_run_gets_a_shorter_one(tiny_checkpoint: str) -> None:
    """Two sequences that each want 64 steps in an 8-page cache: the run is halved until its pages fit, and the
    outputs still equal one step at a time."""
    params = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
    prompts = ["Hello there", "The quick brown fox"]

    def llm(decode_steps: int) -> LLM:
        return LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=2,
                   decode_steps=decode_steps, num_pages=8)

    want = [o.outputs[0].token_ids for o in llm(1).generate(prompts, params)]
    many = llm(64)
    runs: list[int] = []
    original = many.engine.backend.decode_steps

    def spy(batch: StepBatch, steps: int, page_size: int, on_records, sampler=None, stops=None) -> int:  # noqa: ANN001
        runs.append(steps)
        return original(batch, steps, page_size, on_records, sampler, stops)

    many.engine.backend.decode_steps = spy  # type: ignore[method-assign]
    assert [o.outputs[0].token_ids for o in many.generate(prompts, params)] == want
    assert runs and max(runs) < 64 and max(runs) > 1
    assert many.engine.get_stats().kv_pages_used == 0
