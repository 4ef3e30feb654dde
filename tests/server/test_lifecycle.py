"""/health is 503 until the engine has loaded (and after a failed load, which is fatal); generation
waits for it."""
from __future__ import annotations

import threading
from pathlib import Path

import httpx

from server_testlib import MODEL_NAME, ServerThread, make_engine, wait_ready
from server.app import build_app
from server.async_engine import AsyncEngine

GOOD = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2, "temperature": 0}


def test_health_503_until_loaded(tiny_dir: Path) -> None:
    gate = threading.Event()

    def load() -> object:
        assert gate.wait(30), "test gate never opened"
        return make_engine(tiny_dir)

    aeng = AsyncEngine(engine_factory=load, served_model_name=MODEL_NAME)
    with ServerThread(build_app(aeng)) as srv:
        resp = httpx.get(srv.url + "/health")
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "model_loading"
        resp = httpx.post(srv.url + "/v1/completions", json=GOOD)
        assert resp.status_code == 503 and set(resp.json()["error"]) == {"message", "type", "param", "code"}
        assert httpx.get(srv.url + "/metrics").status_code == 200
        gate.set()
        wait_ready(aeng)
        assert httpx.get(srv.url + "/health").status_code == 200
        assert httpx.post(srv.url + "/v1/completions", json=GOOD, timeout=30).status_code == 200
        models = httpx.get(srv.url + "/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["max_model_len"] == 256


def test_failed_load_is_fatal(tmp_path: Path) -> None:
    def load() -> object:
        raise FileNotFoundError(f"no checkpoint in {tmp_path}")

    fatal: list[str] = []
    aeng = AsyncEngine(engine_factory=load, served_model_name=MODEL_NAME, on_fatal=fatal.append)
    with ServerThread(build_app(aeng)) as srv:
        for _ in range(200):
            if fatal:
                break
            threading.Event().wait(0.01)
        assert len(fatal) == 1 and "no checkpoint" in fatal[0]
        resp = httpx.get(srv.url + "/health")
        err = resp.json()["error"]
        assert resp.status_code == 503 and err["code"] == "engine_dead"
        assert str(tmp_path) not in err["message"]  # internals stay in the log
        resp = httpx.post(srv.url + "/v1/completions", json=GOOD)
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "engine_dead"
