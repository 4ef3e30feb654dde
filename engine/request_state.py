"""Per-request bookkeeping the engine keeps beside the scheduler's Sequence."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.detokenizer import OutputText
from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from engine.sampling.penalties import TokenHistory
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


@dataclass
class RequestState:
    seq: Sequence
    params: SamplingParams
    prompt: str | None
    output_text: OutputText
    noise_key: int  # the request's sampling noise key (engine/sampling/noise.py): from its seed, or drawn
    metrics: RequestMetrics
    logprobs: list[dict[int, float]] | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None
    shown: str = ""  # the visible text of the last output returned (it only ever grows)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)
    # The prompt's ids as every output of this request carries them: one copy for all of them (the sequence's own
    # list stays the engine's), not one per output token (a 2 048-token prompt copied for each of its tokens)
    _prompt_ids: list[int] | None = field(default=None, repr=False)

    @property
    def history(self) -> TokenHistory:
        return TokenHistory(prompt=self.seq.prompt_token_ids, output=self.seq.output_token_ids)

    def to_output(self, visible: str) -> RequestOutput:
        self.shown = visible
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
            prompt_token_ids=self._shared_prompt_ids(),
            outputs=[completion],
            finished=self.finish_reason is not None,
            metrics=self.metrics,
            error=self.error,
            prompt_logprobs=list(self.prompt_logprobs) if self.prompt_logprobs is not None else None,
        )

    def _shared_prompt_ids(self) -> list[int]:
        if self._prompt_ids is None:
            self._prompt_ids = list(self.seq.prompt_token_ids)
        return self._prompt_ids
