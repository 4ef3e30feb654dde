"""Property-based fuzzing of the sampling parameters, against a real server.

hypothesis draws whole requests (either endpoint) with extreme but representable values: denormal
temperatures and top_p, seeds at and past the generator's range, penalties from denormal to 1e308,
stop strings that are long, exotic or lone surrogates. Each body is sent twice, streamed and not:
- every reply is a 2xx or an OpenAI-shaped 4xx (never a 5xx, never NaN/Infinity in the JSON), and the
  two replies agree on which it is (validation happens before a stream starts);
- a request without an invalid field is served, one with an invalid field is a 400;
- for an accepted, reproducible request (seeded or greedy) the streamed deltas concatenate to exactly
  the non-streamed text, with the same finish and stop reasons, usage and logprobs; a stop string cut
  from that request's own output always stops it;
- afterwards the server is healthy and idle, and the canary gives its original greedy output.

Bounded by the example count and the fuzz server's limits; inputs are fresh on every run, and a
failure prints the falsifying request and the `@reproduce_failure` blob that replays it.
"""
from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from server_testlib import MODEL_NAME, Canary, ServerThread, check_reply
from engine.sampling_params import GREEDY_TEMPERATURE, SEED_END, SEED_MIN

VOCAB = 1024  # the tiny checkpoint's; only used to aim top_k and stop ids at the vocabulary's edges
TINY = [5e-324, 1e-320, 1e-45, 1e-39, 1e-38]  # float64 denormals, float32 denormals and below

# Temperature: greedy below 1e-5, clamped up to 1e-2 above it; the boundaries are where bugs hide.
temperatures = st.one_of(st.none(), st.sampled_from([0, 0.0, *TINY, 1e-6, GREEDY_TEMPERATURE, 1e-4, 1e-2, 1, 2.0]),
                         st.floats(0.0, 2.0))
top_ps = st.one_of(st.none(), st.sampled_from([1e-46, *TINY, 1e-7, 1e-6, 0.999999, 1, 1.0]),
                   st.floats(0.0, 1.0, exclude_min=True))
top_ks = st.one_of(st.none(), st.sampled_from([-1, 0, 1, 2, VOCAB - 1, VOCAB, VOCAB + 1, 2**63, 2**70]),
                   st.integers(-1, 2 * VOCAB))
min_ps = st.one_of(st.sampled_from([0, *TINY, 0.5, 1, 1.0]), st.floats(0.0, 1.0))
seeds = st.one_of(st.none(), st.sampled_from([0, -1, SEED_MIN, SEED_END - 1, 2**63 - 1, 2**63, 2**32]),
                  st.integers(SEED_MIN, SEED_END - 1))
penalties = st.one_of(st.sampled_from([0, -2, 2, -2.0, 2.0, *TINY, -TINY[0]]), st.floats(-2.0, 2.0))
repetition_penalties = st.one_of(st.sampled_from([1, *TINY, 1e-300, 0.5, 2.0, 1e300, 1.7976931348623157e308]),
                                 st.floats(1e-3, 10.0))
LONG_STOP = st.text(min_size=200, max_size=3000)
# The tiny byte-level tokenizer writes mostly lowercase ASCII, U+FFFD for split bytes, and chat specials
# when they are not skipped: short stops from that alphabet actually match generated text.
_OUTPUT_CHARS = "etaoinshrdlcumwfgypbvkjxqz .`T\ufffd"
matching_stop = st.one_of(st.sampled_from(_OUTPUT_CHARS), st.text(alphabet=_OUTPUT_CHARS, min_size=2, max_size=3),
                          st.sampled_from(["<|eot_id|>", "<|", "|>", "<|end_of_text|>"]))
one_stop = st.one_of(matching_stop, matching_stop, st.text(min_size=1, max_size=12), LONG_STOP)
stops = st.one_of(matching_stop, matching_stop, st.lists(one_stop, max_size=5), one_stop, st.none())
lone_surrogate = st.builds(lambda a, s, b: a + s + b, st.text(max_size=3), st.characters(categories=["Cs"]),
                           st.text(max_size=3))

# One invalid field per invalid request, so the 400 is owed to that field alone. json.dumps writes
# NaN/Infinity bare and Python servers parse them: they must be refused before the sampler.
NAN, INF = math.nan, math.inf
INVALID: dict[str, st.SearchStrategy[Any]] = {
    "temperature": st.sampled_from([-TINY[0], -1, 2.0000001, 1e308, NAN, INF, -INF, "0.5"]),
    "top_p": st.sampled_from([0, 0.0, -0.0, -TINY[0], 1.0000001, NAN, INF]),
    "top_k": st.one_of(st.integers(max_value=-2), st.just(1.5)),
    "min_p": st.sampled_from([-TINY[0], 1.0000001, NAN, -INF]),
    "seed": st.sampled_from([SEED_END, SEED_MIN - 1, 2**100, -(2**100), 1.5, "1", True]),
    "n": st.sampled_from([0, -1, 129, 9, 1.0]),  # 9: more choices than the fuzz server ever runs at once
    "presence_penalty": st.sampled_from([2.0000001, -2.5, NAN, INF]),
    "frequency_penalty": st.sampled_from([-2.0000001, 3, NAN, -INF]),
    "repetition_penalty": st.sampled_from([0, -1, -TINY[0], NAN, INF]),
    "stop": st.one_of(st.just(""), lone_surrogate, st.lists(lone_surrogate, min_size=1, max_size=2),
                      st.builds(lambda xs: [*xs, ""], st.lists(matching_stop, max_size=2)),
                      st.just(["x"] * 65), st.just(5)),
    "stop_token_ids": st.sampled_from([[VOCAB], [-1], [2**64], ["1"]]),
    "max_tokens": st.sampled_from([0, -1, 10**6, 65]),
    "include_stop_str_in_output": st.just("true"),
    "skip_special_tokens": st.just(1),
}

PROMPTS = ["hi", "Once upon a time", "ünïcödé 🦊 text", [1, 2, 3], ["a", "b"]]
MESSAGES = [[{"role": "user", "content": "hi"}],
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "tell me 🦊"}]]


@st.composite
def sampling_requests(draw: st.DrawFn) -> tuple[str, dict[str, Any], str | None]:
    """(path, body, the invalid field or None). Without an invalid field the request must be served."""
    chat = draw(st.booleans())
    body: dict[str, Any] = {"model": MODEL_NAME}
    if chat:
        body["messages"] = draw(st.sampled_from(MESSAGES))
        body[draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))] = draw(st.integers(1, 8))
        if draw(st.booleans()):
            body["logprobs"] = True
            body["top_logprobs"] = draw(st.one_of(st.none(), st.integers(0, 20)))
    else:
        body["prompt"] = draw(st.sampled_from(PROMPTS))
        body["max_tokens"] = draw(st.integers(1, 8))
        body["logprobs"] = draw(st.one_of(st.none(), st.integers(0, 20)))
    # Seeds and stops are drawn more often than the rest: a seeded request is one whose stream can be
    # compared, and stop strings are where streaming and non-streaming text handling differ most.
    for name, strategy in (("seed", seeds), ("stop", stops)):
        if draw(st.sampled_from([True, True, True, False])):
            body[name] = draw(strategy)
    fields = {
        "temperature": temperatures, "top_p": top_ps, "top_k": top_ks, "min_p": min_ps,
        "n": st.integers(1, 3), "presence_penalty": penalties, "frequency_penalty": penalties,
        "repetition_penalty": repetition_penalties,
        "stop_token_ids": st.lists(st.sampled_from([0, 7, 101, VOCAB - 1, VOCAB - 7]), max_size=3),
        "include_stop_str_in_output": st.booleans(), "skip_special_tokens": st.booleans(),
        "ignore_eos": st.booleans(),
    }
    for name, strategy in fields.items():
        if draw(st.booleans()):  # absent fields exercise the server's defaults
            body[name] = draw(strategy)
    invalid = None
    if draw(st.sampled_from([True, False, False, False])):
        invalid = draw(st.sampled_from([*INVALID, "logprobs"]))
        if invalid == "logprobs":  # its valid range differs per endpoint
            body.pop("logprobs", None)
            body["top_logprobs" if chat else "logprobs"] = draw(st.sampled_from([21, -1, 2.0]))
        else:
            if invalid == "max_tokens" and chat:
                body.pop("max_completion_tokens", None)
            body[invalid] = draw(INVALID[invalid])
    return ("/v1/chat/completions" if chat else "/v1/completions"), body, invalid


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    # json.dumps escapes lone surrogates as \udXXX (valid JSON text) and writes NaN/Infinity bare.
    resp = httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=60)
    return resp.status_code, check_reply(resp.status_code, resp.headers.get("content-type", ""), resp.content)


def _entries(path: str, lp: Any) -> list[tuple[Any, ...]]:
    """One (token, logprob, top logprobs[, text offset]) per token of a logprobs object, whole or a
    chunk's; every logprob must be finite and <= 0 (-9999 is the chat API's stand-in for -inf)."""
    if path == "/v1/completions":
        out = [(t, v, sorted((top or {}).items()), off) for t, v, top, off in
               zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"], strict=True)]
    else:
        out = [(t["token"], t["logprob"], [(x["token"], x["logprob"]) for x in t["top_logprobs"]])
               for t in lp["content"]]
    for entry in out:
        for v in [entry[1], *(v for _t, v in entry[2])]:
            assert isinstance(v, float) and math.isfinite(v) and v <= 1e-6, entry
    return out


def _choices_full(path: str, body: Any) -> dict[int, dict[str, Any]]:
    out = {}
    for c in body["choices"]:
        if path == "/v1/chat/completions":
            assert c["message"]["role"] == "assistant"
        out[c["index"]] = {
            "text": c["text"] if path == "/v1/completions" else c["message"]["content"],
            "finish_reason": c["finish_reason"], "stop_reason": c["stop_reason"],
            "logprobs": None if c["logprobs"] is None else _entries(path, c["logprobs"])}
    return out


def _choices_streamed(path: str, events: list[Any], logprobs: bool) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for ev in events:
        if not ev["choices"]:
            continue
        (c,) = ev["choices"]
        acc = out.setdefault(c["index"], {"text": "", "finish_reason": None, "stop_reason": None,
                                          "logprobs": [] if logprobs else None})
        assert acc["finish_reason"] is None, "a chunk after the choice's finish"
        acc["text"] += c["text"] if path == "/v1/completions" else c["delta"].get("content") or ""
        if c["logprobs"] is not None:
            acc["logprobs"] += _entries(path, c["logprobs"])
        acc["finish_reason"], acc["stop_reason"] = c["finish_reason"], c["stop_reason"]
    return out


def _wants_logprobs(body: dict[str, Any]) -> bool:
    return body.get("logprobs") is not None and body.get("logprobs") is not False


def _reproducible(body: dict[str, Any]) -> bool:
    t = body.get("temperature")
    return body.get("seed") is not None or (t is not None and t < GREEDY_TEMPERATURE)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(req=sampling_requests(), data=st.data())
def test_sampling_fuzz(fuzz_server: ServerThread, canary: Canary, req: tuple[str, dict[str, Any], str | None],
                       data: st.DataObject) -> None:
    path, body, invalid = req
    url = fuzz_server.url + path
    stopping = None
    if invalid is None and _reproducible(body) and data.draw(st.booleans(), label="stop on a piece of the output"):
        body, stopping = _stop_on_output(url, path, body, data)
    # Printed with the failing example whatever pytest's verbosity (-q hides the drawn arguments).
    note(f"POST {path} {json.dumps(body)}")
    status, full = _post(url, body)
    stream_status, events = _post(url, {**body, "stream": True, "stream_options": {"include_usage": True}})
    # --hypothesis-show-statistics: how much of the search reached the engine, and how much of it stopped
    # on a stop string.
    event(f"{path} {status}")
    if invalid is not None:
        assert status == stream_status == 400, (body, full, events)
    else:
        assert status == stream_status == 200, (body, full, events)
        choices = _check_served(path, body, full, events)
        if stopping is not None:
            c = choices[stopping]
            assert c["finish_reason"] == "stop" and isinstance(c["stop_reason"], str), (body, c)
    canary.check()


def _stop_on_output(url: str, path: str, body: dict[str, Any],
                    data: st.DataObject) -> tuple[dict[str, Any], int | None]:
    """The body with one more stop string: a piece of what a reproducible request generates without its
    stops, so the stop is certain to match in that choice (returned), wherever decoding put it."""
    status, probe = _post(url, {k: v for k, v in body.items() if k != "stop"})
    assert status == 200, (body, probe)
    texts = {i: c["text"] for i, c in _choices_full(path, probe).items() if c["text"]}
    if not texts:
        return body, None
    index = data.draw(st.sampled_from(sorted(texts)), label="choice")
    text = texts[index]
    start = data.draw(st.integers(0, len(text) - 1), label="stop start")
    piece = text[start:data.draw(st.integers(start + 1, min(len(text), start + 4)), label="stop end")]
    old = body.get("stop")
    stops = [] if old is None else [old] if isinstance(old, str) else list(old)
    return {**body, "stop": [*stops, piece]}, index


def _check_served(path: str, body: dict[str, Any], full: Any, events: Any) -> dict[int, dict[str, Any]]:
    prompt = body.get("prompt")
    n = body.get("n", 1) * (len(prompt) if isinstance(prompt, list) and isinstance(prompt[0], str) else 1)
    want_lp = _wants_logprobs(body)
    choices = _choices_full(path, full)
    assert sorted(choices) == list(range(n))
    usage = full["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    for c in choices.values():
        assert c["finish_reason"] in ("stop", "length"), c
        assert (c["logprobs"] is not None) == want_lp
        if isinstance(c["stop_reason"], str):
            event("a stop string matched")
    if want_lp:  # one logprobs entry per generated token
        assert sum(len(c["logprobs"]) for c in choices.values()) == usage["completion_tokens"]
    assert events[-1]["choices"] == [] and "usage" in events[-1]
    if _reproducible(body):
        event("streamed == non-streamed compared")
        assert _choices_streamed(path, events, want_lp) == choices
        assert events[-1]["usage"] == usage
    return choices


def test_fuzz_edge_regressions(fuzz_server: ServerThread, canary: Canary) -> None:
    """Fixed cases from the fuzzers' search space that must keep working, checked the same way."""
    cases = [
        ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 1e-45, "top_p": 1e-46, "seed": -1}),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 5e-324, "min_p": 5e-324,
                             "repetition_penalty": 1.7976931348623157e308, "seed": SEED_END - 1, "n": 3}),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 6, "temperature": 1.0, "seed": 7, "logprobs": 20,
                             "repetition_penalty": 5e-324, "presence_penalty": -2, "frequency_penalty": 2}),
        ("/v1/chat/completions", {"messages": MESSAGES[1], "max_tokens": 8, "temperature": 2, "seed": SEED_MIN,
                                  "stop": ["\ufffd", "<|eot_id|>", "e"], "include_stop_str_in_output": True,
                                  "skip_special_tokens": False, "logprobs": True, "top_logprobs": 20}),
    ]
    for path, body in cases:
        status, full = _post(fuzz_server.url + path, {"model": MODEL_NAME, **body})
        assert status == 200, full
        stream_status, events = _post(fuzz_server.url + path, {"model": MODEL_NAME, **body, "stream": True})
        assert stream_status == 200
        want_lp = _wants_logprobs(body)
        assert _choices_streamed(path, events, want_lp) == _choices_full(path, full)
        canary.check()


def test_single_long_stop_string_is_accepted(fuzz_server: ServerThread) -> None:
    """The stop-string bound counts strings, not characters: one string longer than the bound is served,
    alone as in a list."""
    for stop in ("x" * 200, ["x" * 200]):
        status, body = _post(fuzz_server.url + "/v1/completions",
                             {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2, "temperature": 0, "stop": stop})
        assert status == 200, body
    status, body = _post(fuzz_server.url + "/v1/completions", {"prompt": "hi", "stop": ["x"] * 65})
    assert status == 400 and body["error"]["param"] == "stop", body
