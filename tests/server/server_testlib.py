"""What the server tests share: the tiny-model constants, an engine maker, a real uvicorn server in a thread on
loopback, and the fuzzers' reply contract and canary. (A module of its own name: every test package here has a
conftest, so `from conftest import` could find another one.)"""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from server.async_engine import AsyncEngine

MAX_MODEL_LEN = 256
MODEL_NAME = "tiny-test"

# ---- fuzzing: a server of its own, the reply contract, the canary ------------------------------

# Each generation on the fuzz server is at most FUZZ_MAX_PENDING choices x FUZZ_MAX_MODEL_LEN tokens
# (fan-outs beyond the limit are a 400), so no generated request can blow the modules' time bound.
FUZZ_MAX_MODEL_LEN = 64
FUZZ_MAX_PENDING = 8
CANARY = {"model": MODEL_NAME, "prompt": "The canary sings at dawn", "max_tokens": 6, "temperature": 0}


def engine_kwargs(**overrides: Any) -> dict[str, Any]:
    """The test servers' LLMEngine keywords (the tiny checkpoint on the torch backend), with `overrides`."""
    kwargs: dict[str, Any] = dict(backend="torch", dtype="float32", max_model_len=MAX_MODEL_LEN,
                                  max_num_seqs=64, progress=False)
    kwargs.update(overrides)
    return kwargs


def make_engine(model_dir: Path, **overrides: Any) -> Any:
    from engine import LLMEngine
    return LLMEngine(str(model_dir), **engine_kwargs(**overrides))


class ServerThread:
    """uvicorn in a background thread on an already-bound loopback socket (no port race)."""

    def __init__(self, app: Any):
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def async_engine(self) -> AsyncEngine:
        return self.app.state.async_engine

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()


def wait_ready(aeng: AsyncEngine, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not aeng.is_ready:
        if time.monotonic() > deadline or aeng.error:
            raise RuntimeError(f"engine not ready: {aeng.error}")
        time.sleep(0.02)


def engine_stats(aeng: AsyncEngine) -> Any:
    """The engine's stats read inside the engine thread (exact, not a racy snapshot)."""
    import asyncio
    return asyncio.run(aeng.call(lambda e: e.get_stats()))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: the server let a non-finite number out")


def strict_json(text: str | bytes) -> Any:
    """json.loads refusing NaN and Infinity, which Python's encoder writes but no JSON client can read."""
    return json.loads(text, parse_constant=_no_constant)


def check_openai_error(body: Any) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str), err
    assert err["param"] is None or isinstance(err["param"], str), err
    assert err["code"] is None or isinstance(err["code"], str), err
    return err


def sse_events(text: str) -> list[Any]:
    """The JSON events of a complete OpenAI event stream. It must end with [DONE] and carry no error
    event: once a 200 is sent, an error event is how a failure (a 5xx) reaches the client."""
    payloads = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
    assert payloads and payloads[-1] == "[DONE]", f"the stream did not end with [DONE]: {text[-300:]!r}"
    events = [strict_json(p) for p in payloads[:-1]]
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    assert not errors, f"error event in a 200 stream: {errors}"
    return events


def check_reply(status: int, content_type: str, body: bytes) -> Any:
    """What every reply of the server must be: a 2xx with a JSON body or a clean event stream, or a 4xx
    with OpenAI's error body; never a 5xx. Returns the parsed body (a stream: its list of events)."""
    assert status < 500, f"server error {status}: {body[:500]!r}"
    if status >= 400:
        assert content_type.startswith("application/json"), content_type
        error = strict_json(body)
        check_openai_error(error)
        return error
    assert 200 <= status < 300, status
    if content_type.startswith("text/event-stream"):
        return sse_events(body.decode("utf-8"))
    assert content_type.startswith("application/json"), content_type
    return strict_json(body)


class Canary:
    """A fixed greedy request, run once up front: afterwards the server must still be healthy, have no
    request or KV page left over, and give exactly the same output, so nothing a fuzzed request did
    leaked into the engine's shared state."""

    def __init__(self, srv: ServerThread):
        self.srv = srv
        self.expected = self._run()
        assert self.expected[0], "the canary generated no text"

    def _run(self) -> tuple[str, str, dict[str, int]]:
        resp = httpx.post(self.srv.url + "/v1/completions", json=CANARY, timeout=60)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        (choice,) = body["choices"]
        return choice["text"], choice["finish_reason"], body["usage"]

    def check(self) -> None:
        health = httpx.get(self.srv.url + "/health", timeout=30)
        assert health.status_code == 200, health.text
        stats = engine_stats(self.srv.async_engine)
        assert (stats.num_running, stats.num_waiting, stats.kv_pages_used) == (0, 0, 0), stats
        assert self._run() == self.expected


def load_after_starting_a_process(model_dir: str, engine_kwargs: dict, model_label: str, served_name: str,
                                  url: str) -> object:
    """An EngineSpec loader (tests/server/test_engine_process.py): in the engine's process, start a process of its own
    the way the cuda backend's stream compiles do (engine/cuda/background_builds.py), then load the engine; a
    process that may not start children fails the load, naming why."""
    import functools

    from engine.cuda.background_builds import BackgroundBuilds
    from server.serving_engine import load_serving_engine

    builds: BackgroundBuilds[int] = BackgroundBuilds()
    builds.submit((1,), functools.partial(int, "7"))
    builds.wait(60)
    got = builds.take((1,))
    builds.close()
    if got != 7:
        raise RuntimeError(f"the engine process could not start a build worker: {got!r}")
    return load_serving_engine(model_dir, engine_kwargs, model_label, served_name, url)
