"""`serve --tensor-parallel-size 2` (the torch backend over two CPU ranks): the same greedy completion as the
one-process server, and the worker process ends with the server."""
from __future__ import annotations

from pathlib import Path

import httpx

from server.app import build_app
from server_testlib import MODEL_NAME, ServerThread, make_engine, wait_ready

BODY = {"model": MODEL_NAME, "prompt": [5, 6, 7, 8], "max_tokens": 8, "temperature": 0, "ignore_eos": True,
        "logprobs": 1}


def _complete(url: str) -> dict:
    r = httpx.post(f"{url}/v1/completions", json=BODY, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_two_ranks_serve_what_one_process_serves(tiny_dir: Path, base_url: str) -> None:
    want = _complete(base_url)
    engine = make_engine(tiny_dir, tensor_parallel_size=2)
    workers = list(engine.backend.ranks.workers)
    with ServerThread(build_app(engine, served_model_name=MODEL_NAME)) as srv:
        wait_ready(srv.async_engine)
        got = _complete(srv.url)
    assert got["text"] == want["text"]
    got_lp, want_lp = got["logprobs"]["token_logprobs"], want["logprobs"]["token_logprobs"]
    assert max(abs(a - b) for a, b in zip(got_lp, want_lp)) <= 1e-4
    for proc in workers:
        assert proc.wait(timeout=15) == 0
