"""bench-serve refuses a server's over-count: with ignore_eos, more completion tokens than max_tokens is a stream that
repeated tokens (an engine that handed a request's outputs out of order did that), and would inflate the tok/s."""
from __future__ import annotations

import asyncio
import json

import httpx

from server.bench_serve import BenchConfig, BenchRequest, _one


def _server(completion_tokens: int) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        chunks = [{"choices": [{"index": 0, "text": "a"}]}] * 3
        chunks.append({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": completion_tokens}})
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})
    return httpx.MockTransport(handler)


def _result(completion_tokens: int, output_len: int = 3):  # noqa: ANN202
    async def go():  # noqa: ANN202
        async with httpx.AsyncClient(transport=_server(completion_tokens), base_url="http://test") as client:
            return await _one(client, BenchConfig(), "m", BenchRequest([1, 2], output_len))
    return asyncio.run(go())


def test_the_asked_count_is_a_result() -> None:
    res = _result(3)
    assert res.ok and res.output_tokens == 3


def test_more_tokens_than_asked_fail_the_request_naming_the_counts() -> None:
    res = _result(5)
    assert not res.ok and "5 completion tokens for max_tokens 3" in res.error


def test_fewer_tokens_than_asked_are_a_result() -> None:  # a context-length cap ends a request early
    res = _result(2)
    assert res.ok and res.output_tokens == 2
