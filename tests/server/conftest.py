"""Fixtures: a tiny random checkpoint and real uvicorn servers on loopback (random free ports), and the fuzzers'
server and canary; the helpers they use live in server_testlib.py."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from server.app import build_app
from server_testlib import (FUZZ_MAX_MODEL_LEN, FUZZ_MAX_PENDING, MODEL_NAME, Canary, ServerThread, engine_kwargs,
                            make_engine, wait_ready)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from models.llama.init_random import init_random_checkpoint
    return init_random_checkpoint("tiny", tmp_path_factory.mktemp("tiny"), seed=1234, dtype="float32",
                                  progress=False)


@pytest.fixture(scope="session")
def server(tiny_dir: Path) -> Iterator[ServerThread]:
    app = build_app(make_engine(tiny_dir), served_model_name=MODEL_NAME)
    with ServerThread(app) as srv:
        wait_ready(srv.async_engine)
        yield srv


@pytest.fixture(scope="session")
def base_url(server: ServerThread) -> str:
    return server.url


@pytest.fixture(scope="module", params=["engine-process", "engine-thread"])
def fuzz_server(request: pytest.FixtureRequest, tiny_dir: Path) -> Iterator[ServerThread]:
    """A server per fuzz module: whatever one fuzzer leaves behind cannot leak into other tests. Both engine
    placements `serve` offers: in a process of its own (its default) and in a thread of the server's."""
    if request.param == "engine-process":
        from server.async_engine import AsyncEngine
        from server.engine_process import EngineProcessClient
        from server.serving_engine import EngineSpec

        spec = EngineSpec(str(tiny_dir), engine_kwargs(max_model_len=FUZZ_MAX_MODEL_LEN), "tiny", MODEL_NAME, "-",
                          "warning")
        app = build_app(AsyncEngine(engine_factory=lambda: EngineProcessClient(spec), served_model_name=MODEL_NAME,
                                    max_pending=FUZZ_MAX_PENDING))
    else:
        app = build_app(make_engine(tiny_dir, max_model_len=FUZZ_MAX_MODEL_LEN), served_model_name=MODEL_NAME,
                        max_pending=FUZZ_MAX_PENDING)
    with ServerThread(app) as srv:
        wait_ready(srv.async_engine)
        yield srv


@pytest.fixture(scope="module")
def canary(fuzz_server: ServerThread) -> Canary:
    return Canary(fuzz_server)
