"""Shared checks of the tensor-parallel engines' tests (tests/engine, tests/gpu)."""
from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from engine.errors import EngineFatalError


def assert_a_dead_worker_fails_the_next_call(llm: Any, prompt: list[int], params: Any) -> None:
    """Kill rank 1's process: the next generate fails naming it; the engine closes either way."""
    try:
        worker = llm.engine.backend.ranks.workers[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        with pytest.raises(EngineFatalError, match="tensor-parallel rank 1 exited"):
            llm.generate({"prompt_token_ids": prompt}, params)
    finally:
        llm.close()
