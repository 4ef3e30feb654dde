"""`serve --engine-process`: the engine in a spawned child (server/engine_process.py) serves what the in-process engine
serves, token for token; aborts, a refused request and a dead child end as they should."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from engine import SamplingParams
from server.app import build_app
from server.async_engine import AsyncEngine
from server.engine_process import EngineProcessClient
from server.serving_engine import EngineSpec
from server_testlib import MAX_MODEL_LEN, MODEL_NAME, ServerThread, wait_ready

KWARGS: dict[str, Any] = dict(backend="torch", dtype="float32", max_model_len=MAX_MODEL_LEN, max_num_seqs=64,
                              progress=False)
PROMPTS = ["The capital of", "Once upon a time there", "1 2 3 4"]


def spec(model_dir: Path) -> EngineSpec:
    return EngineSpec(str(model_dir), KWARGS, "tiny", MODEL_NAME, "-", "warning")


@pytest.fixture(scope="module")
def process_server(tiny_dir: Path) -> Iterator[ServerThread]:
    aeng = AsyncEngine(engine_factory=lambda: EngineProcessClient(spec(tiny_dir)), served_model_name=MODEL_NAME)
    with ServerThread(build_app(aeng)) as srv:
        wait_ready(srv.async_engine, timeout=120)
        yield srv


def completion(url: str, prompt: str, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 1, **extra}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def streamed_text(url: str, prompt: str) -> str:
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": True}
    text = []
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                import json
                text.append(json.loads(line[6:])["choices"][0]["text"])
    return "".join(text)


def test_the_child_serves_the_in_process_engines_tokens(process_server: ServerThread, base_url: str) -> None:
    for prompt in PROMPTS:
        ours, theirs = completion(process_server.url, prompt), completion(base_url, prompt)
        assert ours["choices"][0]["text"] == theirs["choices"][0]["text"]
        assert ours["choices"][0]["logprobs"]["tokens"] == theirs["choices"][0]["logprobs"]["tokens"]
        assert ours["choices"][0]["logprobs"]["token_logprobs"] == pytest.approx(
            theirs["choices"][0]["logprobs"]["token_logprobs"], abs=1e-5)
        assert ours["usage"] == theirs["usage"]
        assert streamed_text(process_server.url, prompt) == theirs["choices"][0]["text"]


def test_n_choices_and_an_abandoned_stream(process_server: ServerThread) -> None:
    out = completion(process_server.url, PROMPTS[0], n=3, temperature=1.0, seed=5)
    assert len(out["choices"]) == 3 and all(c["finish_reason"] == "length" for c in out["choices"])
    body = {"model": MODEL_NAME, "prompt": PROMPTS[1], "max_tokens": 200, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{process_server.url}/v1/completions", json=body, timeout=60) as r:
        next(r.iter_lines())  # leave after the first chunk: the request is aborted in the child
    deadline = time.monotonic() + 30
    while process_server.async_engine.num_pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_server.async_engine.num_pending == 0
    assert completion(process_server.url, PROMPTS[2])["choices"][0]["finish_reason"] == "length"


def test_a_request_the_child_refuses_finishes_with_an_error(tiny_dir: Path) -> None:
    client = EngineProcessClient(spec(tiny_dir))
    try:
        params = SamplingParams(max_tokens=4, temperature=0)
        client.add_request("a", [1, 2, 3], params)
        client.add_request("b", [], params)  # an empty prompt: the engine refuses it
        finished: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while client.has_unfinished_requests() and time.monotonic() < deadline:
            for out in client.step():
                if out.finished:
                    finished[out.request_id] = out
        assert finished["a"].outputs[0].finish_reason == "length" and len(finished["a"].outputs[0].token_ids) == 4
        assert finished["b"].outputs[0].finish_reason == "error" and "prompt is empty" in finished["b"].error
    finally:
        client.close()


def test_a_dead_child_fails_the_server_naming_it(tiny_dir: Path) -> None:
    aeng = AsyncEngine(engine_factory=lambda: EngineProcessClient(spec(tiny_dir)), served_model_name=MODEL_NAME)
    with ServerThread(build_app(aeng)) as srv:
        wait_ready(aeng, timeout=120)
        pid = aeng.engine.pid
        os.kill(pid, signal.SIGKILL)
        r = httpx.post(f"{srv.url}/v1/completions", timeout=60,
                       json={"model": MODEL_NAME, "prompt": "x", "max_tokens": 50, "ignore_eos": True})
        deadline = time.monotonic() + 30
        while aeng.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert aeng.error is not None and "engine process exited" in aeng.error
        assert r.status_code >= 500


def test_the_child_may_start_processes_of_its_own(tiny_dir: Path, base_url: str) -> None:
    """The engine's process is no daemon: its engine starts processes (the cuda backend's stream compiles, tensor-parallel
    ranks); with two torch ranks under it the child serves what the one-process server serves."""
    from functools import partial

    from server_testlib import load_after_starting_a_process

    two_ranks = EngineSpec(str(tiny_dir), {**KWARGS, "tensor_parallel_size": 2}, "tiny", MODEL_NAME, "-", "warning",
                           loader=partial(load_after_starting_a_process))
    aeng = AsyncEngine(engine_factory=lambda: EngineProcessClient(two_ranks), served_model_name=MODEL_NAME)
    with ServerThread(build_app(aeng)) as srv:
        wait_ready(aeng, timeout=180)
        assert aeng.error is None
        ours, theirs = completion(srv.url, PROMPTS[0]), completion(base_url, PROMPTS[0])
        assert ours["choices"][0]["text"] == theirs["choices"][0]["text"]


def test_requests_added_between_two_steps_reach_the_child_in_one_message(tiny_dir: Path) -> None:
    """The child takes a message whole between its steps: every add made before a step (a request's choices) goes in
    one message, so the choices start in the same step, as in the server's own process; an abort sends the adds
    before it first."""
    client = EngineProcessClient(spec(tiny_dir))
    sent: list[tuple[Any, ...]] = []
    real_send = client._send
    client._send = lambda msg: (sent.append(msg), real_send(msg))  # type: ignore[method-assign]
    try:
        params = SamplingParams(max_tokens=2, temperature=0)
        for i in range(3):
            client.add_request(f"c{i}", [5, 6, 7], params)
        assert sent == []
        finished: set[str] = set()
        deadline = time.monotonic() + 60
        while len(finished) < 3 and time.monotonic() < deadline:
            finished |= {o.request_id for o in client.step() if o.finished}
        assert [m[0] for m in sent] == ["add"] and [a[0] for a in sent[0][1]] == ["c0", "c1", "c2"]
        client.add_request("d", [5, 6], params)
        client.abort("d")
        assert [m[0] for m in sent[1:]] == ["add", "abort"]
    finally:
        client.close()
