"""The plug-in point for other engines under test: runners registered by name (the megakernel's row is the
bench's own, engine/bench/megakernel_runner.py).

An engine runner is `fn(weights, config, prompt_ids, new_tokens) -> (token_ids, seconds_per_token)`
and must follow the protocol in baselines.py: greedy, batch 1, `token_ids` = the first `new_tokens`
greedy tokens after `prompt_ids`, `seconds_per_token` = device-synchronised time of the decode steps
(one token in, one token out) divided by their number, prefill excluded, after its own warm-up. A runner that
times several runs may return a third element, each run's seconds per token (`seconds_per_token` is then the one it
reports, their median): the row's notes list them.

The registry is a small object; `DEFAULT_REGISTRY` is the one process-wide instance the CLI reads, so
that an engine module can register itself at import time (the usual plug-in pattern). `run_bench`
also takes an explicit mapping, which tests use to stay independent of that shared state.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence

from models.llama.config import LlamaConfig
from models.llama.weights import LlamaWeights

# A runner whose name ends so samples its tokens (not greedy): its tokens are not compared with the reference's.
SAMPLED_SUFFIX = "-sampled"

EngineRunner = Callable[[LlamaWeights, LlamaConfig, list[int], int],
                        tuple[Sequence[int], float] | tuple[Sequence[int], float, Sequence[float]]]

# Modules the CLI imports before every run so their import-time registrations take effect (besides its
# --engine-module ones); a module that cannot be imported is reported in the result, not fatal.
DEFAULT_ENGINE_PLUGINS: tuple[str, ...] = ()


class EngineRegistry:
    def __init__(self) -> None:
        self._runners: dict[str, EngineRunner] = {}

    def register(self, name: str, fn: EngineRunner) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"engine runner name must be a non-empty string, got {name!r}")
        if not callable(fn):
            raise TypeError(f"engine runner {name!r}: expected a callable, got {type(fn).__name__}")
        self._runners[name] = fn

    def runners(self) -> Mapping[str, EngineRunner]:
        return dict(self._runners)


DEFAULT_REGISTRY = EngineRegistry()


def register_engine_runner(name: str, fn: EngineRunner) -> None:
    """Register `fn` under `name` in the default registry (later registrations replace earlier ones)."""
    DEFAULT_REGISTRY.register(name, fn)


def import_plugins(modules: Sequence[str]) -> list[str]:
    """Import each plug-in module; returns one message per module that failed to import."""
    problems: list[str] = []
    for mod in modules:
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - a broken plug-in must not stop the baselines
            problems.append(f"engine plug-in {mod!r} not loaded: {type(e).__name__}: {e}")
    return problems
