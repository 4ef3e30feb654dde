"""Result objects returned by LLM.generate and LLMEngine.step (vLLM-shaped)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompletionOutput:
    """One generated continuation. Fields are cumulative over the request's life."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, float]] | None = None
    finish_reason: str | None = None  # None while running, then "stop" | "length" | "abort" | "error"
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics = field(default_factory=lambda: RequestMetrics(arrival_time=0.0))
    # One line saying why the request failed inside the engine (finish_reason "error"); None otherwise.
    error: str | None = None
    # With SamplingParams.prompt_logprobs: per prompt token, its logprob and the top k ({token_id: logprob}),
    # None for the first; filled as the prompt is computed (complete once the first token is out).
    prompt_logprobs: list[dict[int, float] | None] | None = None
