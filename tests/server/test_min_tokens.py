"""min_tokens (a vLLM extra) on both generation endpoints: with stop ids covering nearly the whole vocabulary and
the greedy first token, a request stops at once without it and goes on to min_tokens with it (streamed too)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from server_testlib import MAX_MODEL_LEN, MODEL_NAME, sse_events

COMPLETION = {"model": MODEL_NAME, "prompt": "The canary sings", "max_tokens": 8, "temperature": 0}
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "sing"}], "max_tokens": 8, "temperature": 0}


def _post(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(base_url + path, json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def firsts(tiny_dir: Path) -> dict[str, int]:
    """Each endpoint's greedy first token for its body, from the same model offline."""
    from engine import LLM, SamplingParams
    llm = LLM(str(tiny_dir), backend="torch", dtype="float32", progress=False, max_model_len=MAX_MODEL_LEN)
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    return {"/v1/completions": llm.generate(COMPLETION["prompt"], one)[0].outputs[0].token_ids[0],
            "/v1/chat/completions": llm.chat(CHAT["messages"], one)[0].outputs[0].token_ids[0]}


def test_min_tokens_on_both_endpoints(base_url: str, firsts: dict[str, int]) -> None:
    for path, body in (("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)):
        stops = sorted(set(range(1000)) | {firsts[path]})  # at most 1001 ids: under the server's 1024
        free = _post(base_url, path, {**body, "stop_token_ids": stops})
        assert free["usage"]["completion_tokens"] == 1 and free["choices"][0]["finish_reason"] == "stop"
        held = _post(base_url, path, {**body, "stop_token_ids": stops, "min_tokens": 5})
        assert held["usage"]["completion_tokens"] >= 5, held
        whole = _post(base_url, path, {**body, "stop_token_ids": stops, "min_tokens": 8})
        assert whole["usage"]["completion_tokens"] == 8 and whole["choices"][0]["finish_reason"] == "length"


def test_min_tokens_streams(base_url: str) -> None:
    body = {**COMPLETION, "stop_token_ids": list(range(1000)), "min_tokens": 6, "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True}}
    resp = httpx.post(base_url + "/v1/completions", json=body, timeout=60)
    assert resp.status_code == 200
    events = sse_events(resp.text)
    assert events[-1]["usage"]["completion_tokens"] == 6  # sse_events checked the [DONE] end
