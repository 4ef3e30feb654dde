"""engine/warm_up.py: the throwaway requests run to completion and leave the engine as it was (no request, no
pages held, counters at zero), and a real request afterwards decodes as it would have without them."""
from __future__ import annotations

import pytest

from engine import LLMEngine, SamplingParams
from engine.warm_up import warm_up


def _generate(engine: LLMEngine, ids: list[int]) -> list[int]:
    engine.add_request("r", {"prompt_token_ids": ids}, SamplingParams(max_tokens=6, ignore_eos=True, temperature=0.0))
    tokens: list[int] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens = list(out.outputs[0].token_ids)
    return tokens


def test_warm_up_leaves_the_engine_as_it_was(tiny_checkpoint: str) -> None:
    cold = LLMEngine(tiny_checkpoint, backend="torch", max_num_seqs=4)
    want = _generate(cold, [5, 9, 2, 7, 11])
    engine = LLMEngine(tiny_checkpoint, backend="torch", max_num_seqs=4)
    assert warm_up(engine, prompt_len=20) > 0
    stats = engine.get_stats()
    assert not engine.has_unfinished_requests() and stats.kv_pages_used == 0 and stats.steps == 0
    assert _generate(engine, [5, 9, 2, 7, 11]) == want


def test_warm_up_refuses_an_engine_with_requests(tiny_checkpoint: str) -> None:
    engine = LLMEngine(tiny_checkpoint, backend="torch", max_num_seqs=4)
    engine.add_request("r", {"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=2))
    with pytest.raises(RuntimeError, match="already has requests"):
        warm_up(engine)


def test_warm_up_runs_each_concurrency_up_to_the_seats(tiny_checkpoint: str) -> None:
    """Several requests at once per level (capped by max_num_seqs), and the engine is left as it was."""
    engine = LLMEngine(tiny_checkpoint, backend="torch", max_num_seqs=3)
    seen: list[int] = []
    step = engine.step

    def counting_step() -> list:
        seen.append(engine.get_stats().num_running + engine.get_stats().num_waiting)
        return step()

    engine.step = counting_step  # type: ignore[method-assign]
    assert warm_up(engine, prompt_len=12, concurrency=(1, 2, 8)) > 0
    assert max(seen) == 3  # 8 capped at the 3 seats
    stats = engine.get_stats()
    assert not engine.has_unfinished_requests() and stats.kv_pages_used == 0 and stats.steps == 0



def test_warm_up_builds_the_step_of_a_prompt_arriving_beside_decodes(tiny_checkpoint: str) -> None:
    """A server's requests arrive while others decode: the step that prefills the newcomer beside their decodes has a
    shape of its own, which the warm-up builds at each concurrency (the vm backend compiles a stream per shape)."""
    from engine.sampling_params import SamplingParams as Params

    engine = LLMEngine(tiny_checkpoint, backend="vm", dtype="float32", max_num_seqs=3, num_pages=64, decode_steps=1)
    warm_up(engine, prompt_len=12, concurrency=(3,))
    params = Params(max_tokens=4, ignore_eos=True, temperature=0.0)
    for r in range(2):
        engine.add_request(f"r{r}", {"prompt_token_ids": [3 + r] * 12}, params)
    engine.step()  # both prompts
    engine.step()  # both decode
    before = engine.get_stats().stream_compiles
    engine.add_request("late", {"prompt_token_ids": [9] * 12}, params)
    engine.step()  # the newcomer's prompt beside the two decodes
    assert engine.get_stats().stream_compiles == before
    while engine.has_unfinished_requests():
        engine.step()


def test_one_request_finds_its_shapes_after_a_warm_up_larger_than_the_cache(tiny_checkpoint: str) -> None:
    """The warm-up ends with one request, so a stream cache that cannot hold every shape it built keeps a lone
    request's prompt and decode shapes (the vm backend compiles a stream per shape)."""
    engine = LLMEngine(tiny_checkpoint, backend="vm", dtype="float32", max_num_seqs=3, num_pages=64, decode_steps=1)
    engine.backend.cache.capacity = 3  # type: ignore[attr-defined]
    warm_up(engine, prompt_len=12, concurrency=(1, 2, 3))
    before = engine.get_stats().stream_compiles
    engine.add_request("r", {"prompt_token_ids": [4] * 12}, SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished_requests():  # its context stays within the warm-up's (one page)
        engine.step()
    assert engine.get_stats().stream_compiles == before
