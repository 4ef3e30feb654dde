"""megakernel engine: the offline LLM API, the continuous-batching engine and its backends."""
from __future__ import annotations

from typing import Any

__all__ = ["LLM", "LLMEngine", "SamplingParams", "RequestOutput", "CompletionOutput"]


def __getattr__(name: str) -> Any:
    # Lazy so that torch-free submodules (engine.scheduler) import without pulling torch in.
    if name == "LLM":
        from engine.llm import LLM
        return LLM
    if name == "LLMEngine":
        from engine.llm_engine import LLMEngine
        return LLMEngine
    if name == "SamplingParams":
        from engine.sampling_params import SamplingParams
        return SamplingParams
    if name in ("RequestOutput", "CompletionOutput"):
        from engine import outputs
        return getattr(outputs, name)
    raise AttributeError(name)
