"""Bad input -> OpenAI-shaped errors with the right status; the server keeps serving afterwards."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server_testlib import MAX_MODEL_LEN, MODEL_NAME, ServerThread, make_engine, wait_ready
from server.app import build_app

GOOD = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2, "temperature": 0}
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

BAD_COMPLETIONS: list[tuple[str, Any, str | None]] = [
    ("malformed json", '{"prompt": "hi", ', None),
    ("not an object", "[1, 2, 3]", None),
    ("max_tokens string", {**GOOD, "max_tokens": "5"}, "max_tokens"),
    ("max_tokens zero", {**GOOD, "max_tokens": 0}, "max_tokens"),
    ("temperature negative", {**GOOD, "temperature": -0.5}, "temperature"),
    ("temperature too high", {**GOOD, "temperature": 9.0}, "temperature"),
    ("top_p zero", {**GOOD, "top_p": 0.0}, "top_p"),
    ("top_k below -1", {**GOOD, "top_k": -5}, "top_k"),
    ("n zero", {**GOOD, "n": 0}, "n"),
    ("logprobs too many", {**GOOD, "logprobs": 50}, "logprobs"),
    ("stream not bool", {**GOOD, "stream": "yes"}, "stream"),
    ("missing prompt", {"model": MODEL_NAME, "max_tokens": 2}, "prompt"),
    ("prompt wrong type", {**GOOD, "prompt": {"a": 1}}, None),
    ("empty prompt", {**GOOD, "prompt": ""}, "prompt"),
    ("empty token list", {**GOOD, "prompt": []}, "prompt"),
    ("token id out of vocab", {**GOOD, "prompt": [1, 2, 10**9]}, "prompt"),
    ("negative token id", {**GOOD, "prompt": [3, -1]}, "prompt"),
    ("prompt longer than context", {**GOOD, "prompt": [7] * (MAX_MODEL_LEN + 5)}, "prompt"),
    ("text prompt far longer than context", {**GOOD, "prompt": "word " * 100_000}, "prompt"),
    ("max_tokens beyond context", {**GOOD, "prompt": [9] * 250, "max_tokens": 100}, "max_tokens"),
    ("stop not str", {**GOOD, "stop": 5}, "stop"),
    ("too many stop strings", {**GOOD, "stop": ["x"] * 65}, "stop"),
    ("stop_token_ids out of range", {**GOOD, "stop_token_ids": [10**7]}, "stop_token_ids"),
    ("lone surrogate in prompt", '{"prompt": "a\\ud800b", "max_tokens": 2}', "prompt"),
    ("lone surrogate in stop", '{"prompt": "ab", "stop": ["\\udfff"]}', "stop"),
    ("seed too large", {**GOOD, "seed": 2**64}, "seed"),
    ("seed too small", {**GOOD, "seed": -(2**63) - 1}, "seed"),
    ("NaN temperature", '{"prompt": "ab", "temperature": NaN}', "temperature"),
    ("infinite repetition_penalty", '{"prompt": "ab", "repetition_penalty": Infinity}', "repetition_penalty"),
    ("repetition_penalty zero", {**GOOD, "repetition_penalty": 0}, "repetition_penalty"),
    ("min_p above one", {**GOOD, "min_p": 1.5}, "min_p"),
    ("n x prompts never servable", {**GOOD, "n": 128, "prompt": ["a"] * 9}, "n"),
    ("logit_bias", {**GOOD, "logit_bias": {"5": 1.0}}, "logit_bias"),
    ("min_tokens negative", {**GOOD, "min_tokens": -1}, "min_tokens"),
    ("min_tokens string", {**GOOD, "min_tokens": "3"}, "min_tokens"),
    ("min_tokens above max_tokens", {**GOOD, "min_tokens": 3}, "min_tokens"),
    ("min_tokens above the default max_tokens", {**GOOD, "max_tokens": None, "min_tokens": 17}, "min_tokens"),
]

BAD_CHAT: list[tuple[str, Any, str | None]] = [
    ("empty messages", {**CHAT, "messages": []}, "messages"),
    ("missing messages", {"model": MODEL_NAME}, "messages"),
    ("bad role", {**CHAT, "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ("content wrong type", {**CHAT, "messages": [{"role": "user", "content": 42}]}, None),
    ("lone surrogate in content", '{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages.0.content"),
    ("max_completion_tokens beyond context", {**CHAT, "max_completion_tokens": 10_000}, "max_completion_tokens"),
    ("max_completion_tokens negative", {**CHAT, "max_completion_tokens": -1}, "max_completion_tokens"),
    ("top_logprobs without logprobs", {**CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("json response_format", {**CHAT, "response_format": {"type": "json_object"}}, "response_format"),
    ("min_tokens negative", {**CHAT, "min_tokens": -2}, "min_tokens"),
    ("min_tokens above max_tokens", {**CHAT, "min_tokens": 3}, "min_tokens"),
    ("min_tokens above max_completion_tokens", {**CHAT, "max_completion_tokens": 4, "min_tokens": 5}, "min_tokens"),
]


def _post(base_url: str, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    hdrs = {"content-type": "application/json", **(headers or {})}
    return httpx.post(base_url + path, content=content, headers=hdrs, timeout=30)


def _assert_error(resp: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)
    if param is not None:
        assert err["param"] == param, err
    return err


@pytest.mark.parametrize("name,body,param", BAD_COMPLETIONS, ids=[c[0] for c in BAD_COMPLETIONS])
def test_bad_completion_requests(base_url: str, name: str, body: Any, param: str | None) -> None:
    _assert_error(_post(base_url, "/v1/completions", body), 400, param)


@pytest.mark.parametrize("name,body,param", BAD_CHAT, ids=[c[0] for c in BAD_CHAT])
def test_bad_chat_requests(base_url: str, name: str, body: Any, param: str | None) -> None:
    _assert_error(_post(base_url, "/v1/chat/completions", body), 400, param)


def test_server_healthy_after_bad_requests(server: ServerThread) -> None:
    for _name, body, _param in BAD_COMPLETIONS[:6]:
        _post(server.url, "/v1/completions", body)
    assert httpx.get(server.url + "/health").status_code == 200
    ok = _post(server.url, "/v1/completions", GOOD)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
    _assert_error(httpx.get(server.url + "/v1/nothing-here"), 404)
    _assert_error(_post(server.url, "/detokenize", {"tokens": [10**8]}), 400, "tokens")


@pytest.fixture(scope="module")
def guarded(tiny_dir: Path) -> Iterator[ServerThread]:
    """A server with an API key and room for a single in-flight request."""
    app = build_app(make_engine(tiny_dir), served_model_name=MODEL_NAME, api_key="sekret", max_pending=1)
    with ServerThread(app) as srv:
        wait_ready(srv.async_engine)
        yield srv


def test_api_key(guarded: ServerThread) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"}):
        err = _assert_error(_post(guarded.url, "/v1/completions", GOOD, headers), 401)
        assert err["code"] == "invalid_api_key"
    _assert_error(httpx.get(guarded.url + "/v1/models"), 401)
    assert httpx.get(guarded.url + "/health").status_code == 200  # probes need no key
    ok = _post(guarded.url, "/v1/completions", GOOD, {"Authorization": "Bearer sekret"})
    assert ok.status_code == 200


def test_queue_full_then_recovers(guarded: ServerThread) -> None:
    """Hold the engine thread on a gate so request A stays in flight deterministically; B must get
    503 while A occupies the only slot, and succeed once A is done."""
    aeng = guarded.async_engine
    auth = {"Authorization": "Bearer sekret"}
    gate = threading.Event()
    blocker = threading.Thread(target=lambda: asyncio.run(aeng.call(lambda _e: gate.wait(30))))
    blocker.start()
    results: dict[str, httpx.Response] = {}
    first = threading.Thread(target=lambda: results.setdefault(
        "a", _post(guarded.url, "/v1/completions", GOOD, auth)))
    first.start()
    try:
        for _ in range(500):
            if aeng.num_pending == 1:
                break
            time.sleep(0.01)
        assert aeng.num_pending == 1
        err = _assert_error(_post(guarded.url, "/v1/completions", GOOD, auth), 503)
        assert "overloaded" in err["message"] and err["code"] == "server_overloaded"
        assert httpx.get(guarded.url + "/health").status_code == 200
    finally:
        gate.set()
        blocker.join(30)
        first.join(30)
    assert results["a"].status_code == 200
    assert _post(guarded.url, "/v1/completions", GOOD, auth).status_code == 200


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {**GOOD, "model": "gpt-17"}),
    ("/v1/chat/completions", {**CHAT, "model": "nope"}),
    ("/tokenize", {"model": "nope", "prompt": "a"}),
])
def test_unknown_model_is_404(base_url: str, path: str, body: dict[str, Any]) -> None:
    err = _assert_error(_post(base_url, path, body), 404, "model")
    assert err["code"] == "model_not_found"


def test_extreme_seeds_served_and_out_of_range_seed_harmless(base_url: str) -> None:
    """A seed the generator cannot take is a 400 that leaves nothing behind; the range ends work."""
    _assert_error(_post(base_url, "/v1/completions", {**GOOD, "seed": 2**64, "temperature": 1.0}), 400, "seed")
    for seed in (2**64 - 1, -(2**63)):
        resp = _post(base_url, "/v1/completions", {**GOOD, "seed": seed, "temperature": 1.0, "n": 2})
        assert resp.status_code == 200, resp.text
    assert httpx.get(base_url + "/health").status_code == 200
    assert _post(base_url, "/v1/completions", GOOD).status_code == 200


def test_body_limit_and_generic_500(tiny_dir: Path) -> None:
    """Over --max-request-bytes: 413 whether the length is declared or the body is chunked; an
    unexpected exception: a 500 naming a request id and nothing of the exception."""
    app = build_app(make_engine(tiny_dir), served_model_name=MODEL_NAME, max_request_bytes=1000)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internal detail")

    with ServerThread(app) as srv:
        wait_ready(srv.async_engine)
        big = json.dumps({**GOOD, "prompt": "x" * 2000})
        err = _assert_error(_post(srv.url, "/v1/completions", big), 413)
        assert err["code"] == "request_too_large"

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(big), 100):
                yield big[i:i + 100].encode()

        resp = httpx.post(srv.url + "/v1/completions", content=chunks(),
                          headers={"content-type": "application/json"}, timeout=30)
        assert _assert_error(resp, 413)["code"] == "request_too_large"
        assert _post(srv.url, "/v1/completions", GOOD).status_code == 200
        err = _assert_error(httpx.get(srv.url + "/boom"), 500)
        assert "secret" not in err["message"] and "request id req-" in err["message"]
        assert httpx.get(srv.url + "/health").status_code == 200


def test_the_openapi_document_declares_the_400s_the_server_sends(base_url: str) -> None:
    import httpx

    doc = httpx.get(base_url + "/openapi.json", timeout=30).json()
    assert "422" not in str(list(_responses(doc)))
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
        bad = doc["paths"][path]["post"]["responses"]["400"]
        assert bad["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorResponse"
    assert "ErrorInfo" in doc["components"]["schemas"] and "HTTPValidationError" not in doc["components"]["schemas"]


def _responses(doc: dict) -> list[str]:  # type: ignore[type-arg]
    return [code for methods in doc["paths"].values() for op in methods.values() for code in op.get("responses", {})]
