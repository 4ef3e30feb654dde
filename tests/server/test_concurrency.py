"""Concurrent clients are batched continuously and get exactly their single-request greedy output;
disconnecting clients abort their requests and free their KV pages."""
from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server_testlib import MODEL_NAME, ServerThread, engine_stats, make_engine, wait_ready
from server.app import build_app

CLIENTS, PER_CLIENT = 32, 3


def _prompts() -> list[list[int]]:
    rng = random.Random(99)
    return [[rng.randrange(256) for _ in range(rng.randint(3, 24))] for _ in range(CLIENTS * PER_CLIENT)]


def _body(prompt: list[int], max_tokens: int) -> dict:
    return {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}


def _wait_idle(server: ServerThread, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        stats = engine_stats(server.async_engine)
        if (stats.num_running == 0 and stats.num_waiting == 0) or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


@pytest.fixture(scope="module")
def async_server(tiny_dir: Path) -> Iterator[ServerThread]:
    """A server whose engine schedules one step ahead (--async-scheduling): its steps in flight and its runs of
    decode steps stream through the same output sink."""
    with ServerThread(build_app(make_engine(tiny_dir, async_scheduling=True), served_model_name=MODEL_NAME)) as srv:
        wait_ready(srv.async_engine)
        yield srv


def test_concurrent_clients_match_single_request_outputs(server: ServerThread) -> None:
    _check_concurrent_clients(server)


def test_concurrent_clients_match_with_async_scheduling(async_server: ServerThread) -> None:
    """(A look-ahead step's outputs once reached the streams after the next run's: streams repeated tokens.)"""
    _check_concurrent_clients(async_server)


def _check_concurrent_clients(server: ServerThread) -> None:
    prompts = _prompts()
    max_tokens = [4 + (i % 5) for i in range(len(prompts))]  # different lengths: requests leave at different steps
    with httpx.Client(base_url=server.url, timeout=60) as http:
        expected = [http.post("/v1/completions", json=_body(p, m)).json()["choices"][0]["text"]
                    for p, m in zip(prompts, max_tokens)]

    async def client(c: int, http: httpx.AsyncClient) -> list[tuple[int, str]]:
        out = []
        for j in range(PER_CLIENT):
            i = c * PER_CLIENT + j
            stream = (i % 2) == 1
            body = {**_body(prompts[i], max_tokens[i]), "stream": stream}
            if stream:
                text = ""
                async with http.stream("POST", "/v1/completions", json=body) as resp:
                    assert resp.status_code == 200
                    async for line in resp.aiter_lines():
                        if line.startswith("data: {"):
                            text += json.loads(line[6:])["choices"][0]["text"]
                out.append((i, text))
            else:
                resp = await http.post("/v1/completions", json=body)
                assert resp.status_code == 200, resp.text
                out.append((i, resp.json()["choices"][0]["text"]))
        return out

    async def main() -> list[tuple[int, str]]:
        limits = httpx.Limits(max_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as http:
            results = await asyncio.gather(*(client(c, http) for c in range(CLIENTS)))
        return [r for rs in results for r in rs]

    got = dict(asyncio.run(main()))
    assert len(got) == len(prompts)
    mismatches = [i for i in range(len(prompts)) if got[i] != expected[i]]
    assert not mismatches, f"{len(mismatches)} responses differ from their single-request output: " + "; ".join(
        f"{i}: {got[i]!r} != {expected[i]!r}" for i in mismatches[:3])
    stats = _wait_idle(server)
    assert stats.kv_pages_used == 0 and stats.num_running == 0 and stats.num_waiting == 0


def _raw_stream_then_close(server: ServerThread, body: str, read_bytes: int) -> None:
    """Send a request on a raw socket, read a little of the response, then drop the connection."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        req = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}")
        sock.sendall(req.encode())
        if read_bytes:
            got = b""
            while len(got) < read_bytes:
                chunk = sock.recv(4096)
                assert chunk, "server closed early"
                got += chunk
            assert b"200 OK" in got
        else:
            time.sleep(0.3)  # let the request reach the engine


@pytest.fixture(scope="module")
def slow_server(tiny_dir: Path) -> Iterator[ServerThread]:
    """Each engine step takes >= 20 ms and yields one token, so a 190-token request certainly outlives the client."""
    engine = make_engine(tiny_dir, decode_steps=1)
    step = engine.step

    def slow_step() -> Any:
        time.sleep(0.02)
        return step()

    engine.step = slow_step
    with ServerThread(build_app(engine, served_model_name=MODEL_NAME)) as srv:
        wait_ready(srv.async_engine)
        yield srv


def test_disconnect_aborts_and_frees_pages(slow_server: ServerThread) -> None:
    server = slow_server
    long = {"model": MODEL_NAME, "prompt": [11, 12, 13] * 20, "max_tokens": 190, "temperature": 0,
            "ignore_eos": True}
    aborted = server.async_engine.metrics._finished.labels(MODEL_NAME, "abort")
    _raw_stream_then_close(server, json.dumps({**long, "stream": True}), read_bytes=600)
    _raw_stream_then_close(server, json.dumps(long), read_bytes=0)  # non-streaming: disconnect polling
    deadline = time.monotonic() + 30
    while server.async_engine.num_pending and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = _wait_idle(server)
    assert stats.kv_pages_used == 0 and stats.num_running == 0
    assert aborted._value.get() == 2, "both requests should have been aborted, not run to max_tokens"
    assert httpx.get(server.url + "/health").status_code == 200
