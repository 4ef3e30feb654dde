"""One bad request never breaks the engine: it is refused (RequestError) or finishes alone with
finish_reason "error", nothing of it stays in the scheduler, and a canary request is unaffected."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
import torch

from engine import LLM, SamplingParams
from engine import detokenizer
from engine.sampling import run_sampler
from engine.errors import EngineFatalError, RequestError

CANARY_PROMPT = "Hello there, how are"
CANARY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_checkpoint: str) -> LLM:
    return LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=8)


@pytest.fixture(scope="module")
def canary_ids(llm: LLM) -> list[int]:
    return llm.generate(CANARY_PROMPT, CANARY)[0].outputs[0].token_ids


def _assert_clean(llm: LLM, canary_ids: list[int]) -> None:
    engine = llm.engine
    assert not engine._requests and not engine.has_unfinished_requests()
    assert engine.scheduler.num_running == 0 and engine.scheduler.num_waiting == 0
    assert engine.get_stats().kv_pages_used == 0
    assert llm.generate(CANARY_PROMPT, CANARY)[0].outputs[0].token_ids == canary_ids


def _unchecked(params: SamplingParams, **fields: Any) -> SamplingParams:
    """Params with fields set past validation, as a caller mutating a frozen object could."""
    for name, value in fields.items():
        object.__setattr__(params, name, value)
    return params


BAD_REQUESTS: dict[str, Callable[[], tuple[Any, SamplingParams]]] = {
    "huge seed": lambda: ("hi", _unchecked(SamplingParams(seed=1), seed=2**64)),
    "seed below -2**63": lambda: ("hi", _unchecked(SamplingParams(seed=1), seed=-(2**63) - 1)),
    "empty prompt": lambda: ({"prompt_token_ids": []}, CANARY),
    "out-of-vocab token id": lambda: ([1, 2, 10**9], CANARY),
    "prompt longer than the context": lambda: ({"prompt_token_ids": [1] * 5000}, CANARY),
    "prompt of the wrong type": lambda: (3.5, CANARY),
    "params of the wrong type": lambda: ("hi", {"temperature": 0}),  # type: ignore[dict-item]
}


@pytest.mark.parametrize("kind", list(BAD_REQUESTS))
def test_bad_requests_are_refused_and_leave_nothing(llm: LLM, canary_ids: list[int], kind: str) -> None:
    prompt, params = BAD_REQUESTS[kind]()
    with pytest.raises(RequestError):
        llm.engine.add_request(f"bad-{kind}", prompt, params)
    assert llm.engine.scheduler.get(f"bad-{kind}") is None
    with pytest.raises(RequestError):  # and through generate, behind a good request it already added
        llm.generate([CANARY_PROMPT, prompt], [CANARY, params])
    _assert_clean(llm, canary_ids)


@pytest.mark.parametrize("bad", [
    lambda: SamplingParams(seed=2**64), lambda: SamplingParams(seed=-(2**63) - 1),
    lambda: SamplingParams(temperature=float("nan")), lambda: SamplingParams(top_p=0),
])
def test_bad_sampling_params_are_request_errors(llm: LLM, canary_ids: list[int], bad: Callable[[], Any]) -> None:
    with pytest.raises(RequestError):
        llm.generate(CANARY_PROMPT, bad())
    _assert_clean(llm, canary_ids)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=1e-45, max_tokens=8, ignore_eos=True),
    SamplingParams(temperature=1e-39, max_tokens=8, ignore_eos=True),
    SamplingParams(temperature=1.0, top_p=1e-46, max_tokens=8, ignore_eos=True, seed=3),
    SamplingParams(temperature=1.0, top_k=1, min_p=1.0, max_tokens=8, ignore_eos=True),
])
def test_degenerate_but_valid_params_are_greedy(llm: LLM, canary_ids: list[int], params: SamplingParams) -> None:
    out = llm.generate(CANARY_PROMPT, params)[0].outputs[0]
    assert out.finish_reason == "length" and out.token_ids == canary_ids
    _assert_clean(llm, canary_ids)


def _failing_row(monkeypatch: pytest.MonkeyPatch, llm: LLM, canary_ids: list[int], expect: str) -> None:
    bad = SamplingParams(temperature=0.9, seed=666, max_tokens=8, ignore_eos=True)
    other = SamplingParams(temperature=0.9, seed=5, max_tokens=8, ignore_eos=True)
    outs = llm.generate([CANARY_PROMPT, "something else", CANARY_PROMPT], [CANARY, bad, other])
    canary, failed, sampled = (o.outputs[0] for o in outs)
    assert canary.token_ids == canary_ids and canary.finish_reason == "length" and outs[0].error is None
    assert failed.finish_reason == "error" and outs[1].finished
    assert outs[1].error is not None and expect in outs[1].error and "\n" not in outs[1].error
    assert sampled.finish_reason == "length" and len(sampled.token_ids) == 8
    monkeypatch.undo()
    assert llm.generate(CANARY_PROMPT, other)[0].outputs[0].token_ids == sampled.token_ids
    _assert_clean(llm, canary_ids)


def test_a_sampler_failure_fails_that_request_only(llm: LLM, canary_ids: list[int],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = run_sampler.sample_step

    def flaky(logits, t, counters, penalties, token_hash):  # type: ignore[no-untyped-def]
        if bool(((t.keys[:, 0] == 666) & (counters == 2)).any()):  # seed 666's third token
            raise RuntimeError("injected\nfailure")
        return real(logits, t, counters, penalties, token_hash)

    monkeypatch.setattr(run_sampler, "sample_step", flaky)
    _failing_row(monkeypatch, llm, canary_ids, "injected failure")


def test_a_non_finite_logits_row_fails_that_request_only(llm: LLM, canary_ids: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real = run_sampler.RunSampler.step

    def poisoned(self, logits, index):  # type: ignore[no-untyped-def]
        logits = logits.clone()
        for row, key in enumerate(self.keys):
            if key == 666:
                logits[row, 3] = float("nan")
        return real(self, logits, index)

    monkeypatch.setattr(run_sampler.RunSampler, "step", poisoned)
    _failing_row(monkeypatch, llm, canary_ids, "non-finite logits")


def test_a_postprocess_failure_fails_that_request_only(llm: LLM, canary_ids: list[int],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = detokenizer.OutputText.add

    def flaky(self, token_id):  # type: ignore[no-untyped-def]
        if "BOOM" in self._stops:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected")
        return real(self, token_id)

    monkeypatch.setattr(detokenizer.OutputText, "add", flaky)
    bad = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, stop=["BOOM"])
    canary, failed = llm.generate([CANARY_PROMPT, "x"], [CANARY, bad])
    assert canary.outputs[0].token_ids == canary_ids
    assert failed.outputs[0].finish_reason == "error" and "postprocessing failed" in (failed.error or "")
    assert failed.outputs[0].text == ""  # what had been shown (nothing) stays what it was
    monkeypatch.undo()
    _assert_clean(llm, canary_ids)


def test_a_forward_failure_is_fatal_and_generate_cleans_up(llm: LLM, canary_ids: list[int],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(batch):  # type: ignore[no-untyped-def]
        raise RuntimeError("device lost")

    monkeypatch.setattr(llm.engine.backend, "forward", broken)
    monkeypatch.setattr(llm.engine.backend, "greedy", broken)
    with pytest.raises(EngineFatalError, match=r"engine step (\d+ )?failed in the torch backend's forward.*device lost"):
        llm.generate([CANARY_PROMPT, "x"], CANARY)
    monkeypatch.undo()
    _assert_clean(llm, canary_ids)


def test_penalties_bypass_the_backends_greedy_fast_path(llm: LLM, canary_ids: list[int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"greedy": 0}
    real = llm.engine.backend.greedy

    def counting(batch):  # type: ignore[no-untyped-def]
        calls["greedy"] += 1
        return real(batch)

    monkeypatch.setattr(llm.engine.backend, "greedy", counting)
    assert llm.generate(CANARY_PROMPT, CANARY)[0].outputs[0].token_ids == canary_ids
    plain_calls = calls["greedy"]
    assert plain_calls > 0
    penalised = dataclasses.replace(CANARY, frequency_penalty=2.0, repetition_penalty=1.5)
    out = llm.generate(CANARY_PROMPT, penalised)[0].outputs[0]
    assert calls["greedy"] == plain_calls  # no step of the penalised request used the argmax fast path
    assert out.token_ids != canary_ids and len(out.token_ids) == 8
    # The penalised greedy pick, recomputed by hand from the reference logits, for the first two tokens.
    prompt = llm.get_tokenizer().encode(CANARY_PROMPT)
    logits = _reference_logits(llm, prompt + out.token_ids[:1])
    seen = set(prompt) | {out.token_ids[0]}
    for t in seen:
        logits[t] = logits[t] / 1.5 if logits[t] > 0 else logits[t] * 1.5
    logits[out.token_ids[0]] -= 2.0
    assert int(torch.argmax(logits)) == out.token_ids[1]
    monkeypatch.undo()
    _assert_clean(llm, canary_ids)


def _reference_logits(llm: LLM, ids: list[int]) -> torch.Tensor:
    from models.llama.kv_cache import PagedKVCache
    from models.llama.step_batch import StepBatch
    kv = PagedKVCache.allocate(llm.engine.config, num_pages=8, page_size=16, dtype=torch.float32, device="cpu")
    batch = StepBatch.build([ids], [0], [list(range(8))], page_size=16)
    return llm.engine.backend.model.forward(batch, kv)[0].double()


def test_after_a_request_error_the_next_generate_works(llm: LLM, canary_ids: list[int]) -> None:
    # The first request is queued before the second is refused: generate must withdraw it.
    bad = _unchecked(SamplingParams(seed=1), seed=18446744073709551616)
    with pytest.raises(RequestError, match="^seed"):
        llm.generate([CANARY_PROMPT, CANARY_PROMPT], [CANARY, bad])
    _assert_clean(llm, canary_ids)
    with pytest.raises(RequestError, match="^seed"):
        llm.engine.add_request("direct", CANARY_PROMPT, bad)
    _assert_clean(llm, canary_ids)


def test_max_tokens_beyond_the_context_stops_at_max_model_len(tiny_checkpoint: str) -> None:
    small = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_model_len=24)
    out = small.generate(CANARY_PROMPT, SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True))[0]
    assert out.outputs[0].finish_reason == "length"
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == small.engine.max_model_len == 24
    assert small.engine.get_stats().kv_pages_used == 0
