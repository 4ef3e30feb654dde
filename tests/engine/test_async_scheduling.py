"""One step of look-ahead (EngineConfig.async_scheduling, engine/lookahead.py): every request's streamed outputs
(token ids, text, finish and stop reasons, logprobs, prompt logprobs) are exactly those without it, whatever
arrives, stops, is aborted or preempted while a step is in flight; and the KV pages all come back."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from engine import LLMEngine, SamplingParams
from engine.outputs import RequestOutput

PROMPTS = ["Hello there", "The quick brown fox jumps over the lazy dog", "a", "Numbers: 1 2 3 4 5 6 7",
           "Once upon a time", "zz"]
Arrival = tuple[str, str, SamplingParams]
Record = tuple[object, ...]


def _engine(checkpoint: str, backend: str, async_scheduling: bool, **kw: object) -> LLMEngine:
    opts: dict[str, object] = dict(backend=backend, dtype="float32", progress=False, max_num_seqs=3,
                                   max_num_batched_tokens=16, decode_steps=1, num_pages=64)
    opts.update(kw)
    return LLMEngine(checkpoint, async_scheduling=async_scheduling, **opts)


def _record(out: RequestOutput) -> Record:
    c = out.outputs[0]
    return (tuple(c.token_ids), c.text, c.finish_reason, c.stop_reason, out.error,
            None if c.logprobs is None else [sorted(d.items()) for d in c.logprobs],
            None if out.prompt_logprobs is None else [None if d is None else sorted(d.items())
                                                      for d in out.prompt_logprobs])


def _assert_same(got: dict[str, list[Record]], want: dict[str, list[Record]]) -> None:
    """Equal outputs; logprob values to 1e-5 (a batch of another shape rounds the reference model's sums apart)."""
    assert got.keys() == want.keys()
    for rid in want:
        assert len(got[rid]) == len(want[rid]), rid
        for g, w in zip(got[rid], want[rid]):
            assert g[:5] == w[:5], rid
            for lps_g, lps_w in ((g[5], w[5]), (g[6], w[6])):
                assert (lps_g is None) == (lps_w is None), rid
                for a, b in zip(lps_g or [], lps_w or []):
                    assert (a is None) == (b is None) and [k for k, _ in a or []] == [k for k, _ in b or []], rid
                    assert all(abs(x - y) < 1e-5 for (_, x), (_, y) in zip(a or [], b or [])), rid


def _drive(engine: LLMEngine, arrivals: dict[int, list[Arrival]],
           abort_after: dict[str, int] | None = None) -> dict[str, list[Record]]:
    """Run until done: `arrivals[k]` join before the k-th engine step; a request in `abort_after` is aborted once it
    has streamed that many tokens. Returns each request's outputs in the order they streamed."""
    streams: dict[str, list[Record]] = {}
    call = 0
    while call <= max(arrivals) or engine.has_unfinished_requests():
        for rid, prompt, params in arrivals.get(call, []):
            engine.add_request(rid, prompt, params)
        call += 1
        assert call < 2000
        for out in engine.step():
            streams.setdefault(out.request_id, []).append(_record(out))
            n = len(out.outputs[0].token_ids)
            if abort_after and not out.finished and abort_after.get(out.request_id) == n:
                assert engine.abort(out.request_id)
    assert engine.get_stats().kv_pages_used == 0
    return streams


def _same(checkpoint: str, backend: str, arrivals: dict[int, list[Arrival]],
          check: Callable[[LLMEngine], None] | None = None, **kw: object) -> dict[str, list[Record]]:
    want = _drive(_engine(checkpoint, backend, False, **kw), arrivals)
    ahead = _engine(checkpoint, backend, True, **kw)
    fed = _count_feeds(ahead)
    got = _drive(ahead, arrivals)
    _assert_same(got, want)
    assert fed[0] > 0  # steps did launch ahead, their tokens fed from the step before
    for rid, outs in got.items():  # streaming: one more token per output, the last one finished
        lengths = [len(o[0]) for o in outs]
        assert lengths == sorted(lengths) and outs[-1][2] is not None, rid
    if check is not None:
        check(ahead)
    return got


def _count_feeds(engine: LLMEngine) -> list[int]:
    """Counts the backend's launches whose tokens are fed from the step before (a step launched ahead)."""
    count = [0]
    launch = engine.backend.launch_step

    def counted(batch, greedy, feed=None):  # type: ignore[no-untyped-def]
        count[0] += feed is not None and len(feed.src) > 0
        return launch(batch, greedy, feed)
    engine.backend.launch_step = counted  # type: ignore[method-assign]
    return count


def _greedy(n: int, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["torch", "vm"])
def test_greedy_with_arrivals_mid_stream(tiny_checkpoint: str, backend: str) -> None:
    arrivals = {0: [("a", PROMPTS[0], _greedy(9)), ("b", PROMPTS[1], _greedy(3))],
                2: [("c", PROMPTS[2], _greedy(12))],
                5: [("d", PROMPTS[3], _greedy(1)), ("e", PROMPTS[4], _greedy(7))]}
    _same(tiny_checkpoint, backend, arrivals)


def test_seeded_sampling_and_logprobs(tiny_checkpoint: str) -> None:
    sampled = [SamplingParams(temperature=0.9, top_p=0.9, seed=7 + i, max_tokens=10, ignore_eos=True,
                              logprobs=2 if i % 2 else None) for i in range(4)]
    arrivals = {0: [("s0", PROMPTS[0], sampled[0]), ("g", PROMPTS[1], _greedy(6, logprobs=3))],
                1: [("s1", PROMPTS[2], sampled[1])],
                4: [("s2", PROMPTS[3], sampled[2]), ("s3", PROMPTS[4], sampled[3])]}
    _same(tiny_checkpoint, "torch", arrivals)


def test_stop_strings_ids_and_lengths_end_sequences_mid_batch(tiny_checkpoint: str) -> None:
    ref = _drive(_engine(tiny_checkpoint, "torch", False), {0: [("r", PROMPTS[3], _greedy(24))]})["r"][-1]
    ids, text = ref[0], ref[1]
    assert isinstance(ids, tuple) and isinstance(text, str)
    stop = text[4:7] if len(text) > 7 else text[:1]
    arrivals = {0: [("id", PROMPTS[3], SamplingParams(temperature=0.0, max_tokens=24, stop_token_ids=[ids[5]])),
                    ("str", PROMPTS[3], SamplingParams(temperature=0.0, max_tokens=24, stop=[stop])),
                    ("len", PROMPTS[0], _greedy(2))],
                1: [("eos", PROMPTS[5], SamplingParams(temperature=0.0, max_tokens=30)),
                    ("late", PROMPTS[4], _greedy(5))]}
    got = _same(tiny_checkpoint, "torch", arrivals)
    assert got["id"][-1][2] == "stop" and got["str"][-1][2] == "stop" and got["len"][-1][2] == "length"


def test_aborts_while_a_step_is_in_flight(tiny_checkpoint: str) -> None:
    arrivals = {0: [("a", PROMPTS[0], _greedy(20)), ("b", PROMPTS[1], _greedy(20)), ("c", PROMPTS[2], _greedy(8))]}
    engine = _engine(tiny_checkpoint, "torch", False)
    want = _drive(engine, arrivals, {"a": 3, "b": 1})
    ahead = _engine(tiny_checkpoint, "torch", True)
    fed = _count_feeds(ahead)
    got = _drive(ahead, arrivals, {"a": 3, "b": 1})
    _assert_same(got, want)
    assert fed[0] > 0
    assert len(got["a"][-1][0]) == 3 and got["a"][-1][2] is None  # aborted: no final output, three tokens shown


@pytest.mark.parametrize("backend", ["torch", "vm"])
def test_preemption_under_a_tiny_kv_pool(tiny_checkpoint: str, backend: str) -> None:
    arrivals = {0: [(f"p{i}", PROMPTS[i], _greedy(26)) for i in range(3)],
                3: [("q", PROMPTS[4], SamplingParams(temperature=0.7, seed=3, max_tokens=20, ignore_eos=True))]}

    def preempted(engine: LLMEngine) -> None:
        assert engine.get_stats().num_preemptions > 0

    _same(tiny_checkpoint, backend, arrivals, preempted, num_pages=6, page_size=8)


def test_prompt_logprobs_and_penalties_fall_back(tiny_checkpoint: str) -> None:
    arrivals = {0: [("pl", PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=5, prompt_logprobs=2)),
                    ("g", PROMPTS[0], _greedy(12))],
                2: [("pen", PROMPTS[3], SamplingParams(temperature=0.8, seed=11, max_tokens=9, ignore_eos=True,
                                                       repetition_penalty=1.3, frequency_penalty=0.5))]}
    _same(tiny_checkpoint, "torch", arrivals)


def test_runs_of_decode_steps_still_start(tiny_checkpoint: str) -> None:
    """With decode runs on, look-ahead covers the steps the host must act in, and gives way to runs in between."""
    arrivals = {0: [("a", PROMPTS[0], _greedy(30)), ("b", PROMPTS[1], _greedy(17))],
                6: [("c", PROMPTS[2], _greedy(10))]}

    def few_steps(engine: LLMEngine) -> None:
        assert engine.get_stats().steps > 0

    _same(tiny_checkpoint, "torch", arrivals, few_steps, decode_steps=8)


def test_the_option_and_its_flag() -> None:
    import argparse

    from engine.cli.engine_flags import add_engine_flags
    from engine.engine_config import EngineConfig

    assert EngineConfig.async_scheduling is False
    p = argparse.ArgumentParser()
    add_engine_flags(p)
    assert p.parse_args(["--model", "m", "--async-scheduling"]).async_scheduling is True
    assert p.parse_args(["--model", "m"]).async_scheduling is False
    assert p.parse_args(["--model", "m", "--no-async-scheduling"]).async_scheduling is False
    with pytest.raises(ValueError):
        EngineConfig(model="m", async_scheduling=1)  # type: ignore[arg-type]


def test_a_run_after_a_step_in_flight_streams_in_order(tiny_checkpoint: str) -> None:
    """With an output sink (a server's: a run of decode steps streams its outputs as it goes), the step in flight's
    outputs reach the sink before the run's: each request's streamed token count only grows, as without look-ahead.
    (The in-flight step's outputs came after the run's, so a stream saw token 1 after tokens 2..4.)"""
    def streamed(async_scheduling: bool) -> dict[str, list[Record]]:
        engine = _engine(tiny_checkpoint, "torch", async_scheduling, decode_steps=4, max_num_seqs=4)
        streams: dict[str, list[Record]] = {}

        def sink(outs: list[RequestOutput]) -> None:
            for out in outs:
                streams.setdefault(out.request_id, []).append(_record(out))

        engine.output_sink = sink
        params = SamplingParams(temperature=0.0, max_tokens=9, ignore_eos=True)
        for i, prompt in enumerate(PROMPTS[:4]):
            engine.add_request(f"r{i}", prompt, params)
        while engine.has_unfinished_requests():
            sink(engine.step())
        return streams

    got = streamed(True)
    for rid, records in got.items():
        counts = [len(r[0]) for r in records]
        assert counts == sorted(counts) and counts[-1] == 9, (rid, counts)
    _assert_same(got, streamed(False))
