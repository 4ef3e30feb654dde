"""Per-request bookkeeping the engine keeps beside the scheduler's Sequence."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


@dataclass
class RequestState:
    seq: Sequence
    params: SamplingParams
    prompt: str | None
    detokenizer: IncrementalDetokenizer
    generator: torch.Generator
    metrics: RequestMetrics
    logprobs: list[dict[int, float]] | None = None
    text: str = ""  # full text so far (stop string already cut off once finished)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def to_output(self, visible: str) -> RequestOutput:
        completion = CompletionOutput(
            index=0,
            text=visible,
            token_ids=list(self.seq.output_token_ids),
            logprobs=list(self.logprobs) if self.logprobs is not None else None,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )
        return RequestOutput(
            request_id=self.seq.seq_id,
            prompt=self.prompt,
            prompt_token_ids=list(self.seq.prompt_token_ids),
            outputs=[completion],
            finished=self.finish_reason is not None,
            metrics=self.metrics,
        )
