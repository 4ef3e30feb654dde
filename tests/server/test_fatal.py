"""Failures inside the engine, injected: a request the engine fails alone fails only that request; a
step that raises is fatal (every in-flight request gets an error, on_fatal is called once); an add
that fails part-way leaves nothing behind."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server_testlib import MODEL_NAME, ServerThread, engine_stats, make_engine, wait_ready
from engine.errors import EngineFatalError, RequestError
from engine.outputs import CompletionOutput, RequestOutput
from server.app import build_app
from server.async_engine import AsyncEngine

POISON = 999  # a prompt holding this token id makes FaultyEngine fail the request (or the add)
LONG = {"model": MODEL_NAME, "prompt": [5, 6, 7], "max_tokens": 120, "temperature": 0, "ignore_eos": True}


class FaultyEngine:
    """A real engine with switchable faults, obeying the engine's failure contract."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.poisoned: set[str] = set()
        self.fail_add_of: str | None = None  # request id suffix whose add raises
        self.fatal = threading.Event()  # set: the next step raises EngineFatalError
        self.steps = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def add_request(self, request_id: str, prompt: Any, params: Any) -> None:
        if self.fail_add_of is not None and request_id.endswith(self.fail_add_of):
            raise RequestError("prompt rejected by the injected fault")
        self._engine.add_request(request_id, prompt, params)
        if POISON in prompt["prompt_token_ids"]:
            self.poisoned.add(request_id)

    def step(self) -> list[RequestOutput]:
        time.sleep(0.01)  # long requests certainly outlive the test's actions
        self.steps += 1
        if self.fatal.is_set():
            raise EngineFatalError("engine step failed: injected device fault")
        outputs = [o for o in self._engine.step() if o.request_id not in self.poisoned]
        for rid in list(self.poisoned):  # the engine frees a failed request and reports it once
            self.poisoned.discard(rid)
            self._engine.abort(rid)
            outputs.append(RequestOutput(request_id=rid, prompt=None, prompt_token_ids=[POISON], finished=True,
                                         outputs=[CompletionOutput(0, "", [], finish_reason="error")],
                                         error="injected: non-finite logits"))
        return outputs


@pytest.fixture()
def faulty(tiny_dir: Path) -> Iterator[tuple[ServerThread, FaultyEngine, list[str]]]:
    engine = FaultyEngine(make_engine(tiny_dir))
    fatal: list[str] = []
    aeng = AsyncEngine(engine, served_model_name=MODEL_NAME, on_fatal=fatal.append)
    with ServerThread(build_app(aeng)) as srv:
        wait_ready(aeng)
        yield srv, engine, fatal


def _events(resp: httpx.Response) -> list[Any]:
    return [json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]"
            for line in resp.iter_lines() if line.startswith("data: ")]


def test_request_error_fails_only_that_request(faulty: tuple[ServerThread, FaultyEngine, list[str]]) -> None:
    srv, _engine, fatal = faulty
    results: list[httpx.Response] = []
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        healthy = threading.Thread(target=lambda: results.append(http.post("/v1/completions", json=LONG)))
        healthy.start()
        bad = http.post("/v1/completions", json={**LONG, "prompt": [5, POISON]})
        assert bad.status_code == 500
        err = bad.json()["error"]
        assert "request id req-" in err["message"] and "non-finite" not in err["message"]
        with http.stream("POST", "/v1/completions", json={**LONG, "prompt": [POISON], "stream": True}) as resp:
            events = _events(resp)
        assert events[-1] == "[DONE]" and "request id req-" in events[-2]["error"]["message"]
        healthy.join(60)
        assert results[0].status_code == 200 and results[0].json()["usage"]["completion_tokens"] == 120
        assert http.get("/health").status_code == 200 and not fatal
        assert srv.async_engine.num_pending == 0


def test_fatal_step_fails_everything_and_calls_on_fatal(
        faulty: tuple[ServerThread, FaultyEngine, list[str]]) -> None:
    srv, engine, fatal = faulty
    aeng = srv.async_engine
    results: list[httpx.Response] = []
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        waiting = threading.Thread(target=lambda: results.append(http.post("/v1/completions", json=LONG)))
        waiting.start()
        with http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as resp:
            lines = resp.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["choices"][0]["finish_reason"] is None
            engine.fatal.set()
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        assert json.loads(rest[-2][6:])["error"]["code"] == "engine_dead"
        waiting.join(60)
        assert results[0].status_code == 500 and results[0].json()["error"]["code"] == "engine_dead"
        assert "injected" not in results[0].text
        assert len(fatal) == 1 and "injected device fault" in fatal[0]
        health = http.get("/health")
        assert health.status_code == 503 and health.json()["error"]["code"] == "engine_dead"
        again = http.post("/v1/completions", json=LONG)
        assert again.status_code == 503 and again.json()["error"]["code"] == "engine_dead"
    assert aeng.num_pending == 0


def test_failed_add_leaves_nothing_behind(faulty: tuple[ServerThread, FaultyEngine, list[str]]) -> None:
    srv, engine, _fatal = faulty
    aeng = srv.async_engine
    engine.fail_add_of = "-1"  # choice 1 of n=3: choice 0 is already added and must be rolled back
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        resp = http.post("/v1/completions", json={**LONG, "n": 3})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"
        assert aeng.num_pending == 0
        stats = engine_stats(aeng)
        assert stats.num_running == stats.num_waiting == stats.kv_pages_used == 0
        engine.fail_add_of = None
        ok = http.post("/v1/completions", json={**LONG, "max_tokens": 3, "n": 3})
        assert ok.status_code == 200 and len(ok.json()["choices"]) == 3

