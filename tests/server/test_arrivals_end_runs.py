"""A request that reaches the server while the engine thread is inside a run of decode steps (it drains its queue
only between steps) ends that run within a step, so its prompt starts at once instead of after the whole run."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from server_testlib import MODEL_NAME, ServerThread, make_engine, wait_ready
from server.app import build_app
from server.async_engine import AsyncEngine


def test_a_request_queued_during_a_run_ends_it(tiny_dir: Path) -> None:
    engine = make_engine(tiny_dir, decode_steps=32)
    run_started, runs = threading.Event(), []
    original = engine.backend.decode_steps

    def spy(batch, steps, page_size, on_records, sampler=None, stops=None):  # noqa: ANN001, ANN202
        def take(records):  # noqa: ANN001, ANN202
            if not run_started.is_set():  # hold the run until the second request is queued behind it
                run_started.set()
                deadline = time.monotonic() + 20
                while aeng._adds_queued == 0 and time.monotonic() < deadline:
                    time.sleep(0.005)
            return on_records(records)
        runs.append((steps, original(batch, steps, page_size, take, sampler, stops)))
        return runs[-1][1]

    engine.backend.decode_steps = spy
    aeng = AsyncEngine(engine=engine, served_model_name=MODEL_NAME)
    body = {"model": MODEL_NAME, "prompt": "hello there", "max_tokens": 30, "temperature": 0, "ignore_eos": True}
    with ServerThread(build_app(aeng)) as srv:
        wait_ready(aeng)
        results: list[httpx.Response] = []
        first = threading.Thread(target=lambda: results.append(
            httpx.post(srv.url + "/v1/completions", json=body, timeout=60)))
        first.start()
        assert run_started.wait(30)
        second = httpx.post(srv.url + "/v1/completions", json={**body, "max_tokens": 3}, timeout=60)
        first.join(60)
        assert second.status_code == 200 and results and results[0].status_code == 200
        assert results[0].json()["usage"]["completion_tokens"] == 30
    steps, ran = runs[0]
    assert steps > 1 and ran == 1  # the run ended at its first step's records, as the request was queued
    assert aeng._adds_queued == 0
