"""A serving process keeps what it loaded out of the garbage collector's reach (server/serving_engine.py
freeze_startup_heap): collections set off by each step's allocations walk only what serving created since."""
from __future__ import annotations

import gc
from pathlib import Path

from server.serving_engine import freeze_startup_heap, load_serving_engine


def test_the_serving_engine_is_frozen_once_ready(tiny_dir: Path) -> None:
    try:
        gc.unfreeze()
        engine = load_serving_engine(str(tiny_dir), {"backend": "torch", "dtype": "float32", "progress": False},
                                     "tiny", "tiny", "-")
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert not any(obj is engine for obj in gc.get_objects())  # the engine is among the frozen objects
        assert freeze_startup_heap() >= frozen
    finally:
        gc.unfreeze()  # the test process's heap as it was
