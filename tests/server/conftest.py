"""Fixtures: a tiny random checkpoint and real uvicorn servers on loopback (random free ports)."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import uvicorn

from server.app import build_app
from server.async_engine import AsyncEngine

MAX_MODEL_LEN = 256
MODEL_NAME = "tiny-test"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models.llama.init_random import init_random_checkpoint
    return init_random_checkpoint("tiny", tmp_path_factory.mktemp("tiny"), seed=1234, dtype="float32",
                                  progress=False)


def make_engine(model_dir: Path, **overrides: Any) -> Any:
    from engine import LLMEngine
    kwargs: dict[str, Any] = dict(backend="torch", dtype="float32", max_model_len=MAX_MODEL_LEN,
                                  max_num_seqs=64, progress=False)
    kwargs.update(overrides)
    return LLMEngine(str(model_dir), **kwargs)


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


@pytest.fixture(scope="session")
def server(tiny_dir: Path) -> Iterator[ServerThread]:
    app = build_app(make_engine(tiny_dir), served_model_name=MODEL_NAME)
    with ServerThread(app) as srv:
        wait_ready(srv.async_engine)
        yield srv


@pytest.fixture(scope="session")
def base_url(server: ServerThread) -> str:
    return server.url
