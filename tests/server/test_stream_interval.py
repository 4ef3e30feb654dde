"""--stream-interval: a stream's chunks gathered into fewer writes (the first token at once, a finishing choice
flushes), with the same events and text as a stream written chunk by chunk."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server.app import build_app
from server.async_engine import AsyncEngine
from server.serving_common import StreamGate
from server_testlib import MODEL_NAME, ServerThread, make_engine, wait_ready


def writes(interval: int, steps: list[tuple[int, bool]]) -> list[int]:
    """The steps (0-based) after which a gate of `interval` writes, fed (tokens, finished) per step."""
    gate, out = StreamGate(interval), []
    for i, (tokens, finished) in enumerate(steps):
        gate.add(tokens, finished)
        if gate.due():
            out.append(i)
    return out


def test_the_gate_writes_the_first_token_then_every_interval_and_the_end() -> None:
    assert writes(1, [(1, False)] * 5) == [0, 1, 2, 3, 4]
    assert writes(3, [(1, False)] * 7 + [(1, True)]) == [0, 3, 6, 7]
    assert writes(4, [(2, False), (3, False), (1, False), (3, False)]) == [0, 2]
    assert writes(8, [(1, False), (1, True)]) == [0, 1]


@pytest.fixture(scope="module")
def gated_server(tiny_dir: Path) -> Iterator[ServerThread]:
    aeng = AsyncEngine(make_engine(tiny_dir), served_model_name=MODEL_NAME, stream_interval=4)
    with ServerThread(build_app(aeng)) as srv:
        wait_ready(srv.async_engine)
        yield srv


def stream(url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of a stream."""
    with httpx.stream("POST", url + path, json={"model": MODEL_NAME, "stream": True, **body}, timeout=60) as r:
        assert r.status_code == 200
        text = r.read().decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "Once upon", "max_tokens": 17, "temperature": 0, "ignore_eos": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 17, "temperature": 0,
                              "ignore_eos": True}),
])
def test_a_gated_stream_carries_the_same_events(gated_server: ServerThread, base_url: str, path: str,
                                                body: dict[str, Any]) -> None:
    gated = stream(gated_server.url, path, body)
    plain = stream(base_url, path, body)
    strip = lambda evs: [{k: v for k, v in e.items() if k not in ("id", "created")} for e in evs]  # noqa: E731
    assert strip(gated) == strip(plain)
