"""A serving engine and how it is loaded: the same in the server's process (`--no-engine-process`) and in the engine's
own (server/engine_process.py, whose child gets an EngineSpec)."""
from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


def load_serving_engine(model_dir: str, engine_kwargs: dict[str, Any], model_label: str, served_name: str,
                        url: str) -> Any:
    """An LLMEngine ready to serve: on the cuda backend its common step shapes' instruction streams are built first."""
    from engine import LLMEngine
    from engine.warm_up import warm_up

    engine = LLMEngine(model_dir, **engine_kwargs)
    if engine.backend_name == "cuda":  # its step shapes' instruction streams are built on first use
        log.info("warming up: throwaway requests (alone and several at once) build the instruction streams of "
                 "common step shapes")
        log.info("warmed up in %.1f s", warm_up(engine))
    # The process is named: with the engine in its own process (serve's default) the GPU is held by that one, not by
    # the server process uvicorn's "Started server process" line names.
    log.info("ready: %s (backend %s, max_model_len %d) as %r on %s (engine in process %d; %d objects kept out of "
             "garbage collection)", model_label, engine.backend_name, engine.max_model_len, served_name, url,
             os.getpid(), freeze_startup_heap())
    return engine


def freeze_startup_heap() -> int:
    """Move every object alive now (the modules, the engine, its weights' and streams' Python objects) out of the
    garbage collector's reach; returns how many. A serving step allocates enough to set off collections every few
    steps, and each full one walked this whole heap while holding the GIL: on the development CPU the engine's own
    work per token was 25.5-28.7 us with collections as they were, 18 with none, 15.6-28.3 after this."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass(frozen=True)
class EngineSpec:
    """What the child needs to load the engine (picklable: the child is a fresh interpreter)."""

    model_dir: str
    engine_kwargs: dict[str, Any]
    model_label: str
    served_name: str
    url: str
    log_level: str = "info"
    # Called in the child as loader(model_dir, engine_kwargs, model_label, served_name, url); a module-level function
    # (or a functools.partial of one) so the spec pickles: dev/serve_ceiling.py passes one whose backend only sleeps.
    loader: Callable[..., Any] = load_serving_engine
