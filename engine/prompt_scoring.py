"""Prompt logprobs (SamplingParams.prompt_logprobs, the server's echo + logprobs): a scored request's prompt is
computed one token per step (Sequence.max_chunk = 1), so each step's logits for it are the distribution of its
next prompt token, which is recorded with the top k. A prefix recomputed after preemption is not scored twice."""
from __future__ import annotations

from collections.abc import Mapping

import torch

from engine.request_state import RequestState
from engine.sampling.results import NON_FINITE, prompt_token_logprobs
from engine.scheduler.requests.request_scheduler import ScheduledChunk


def scores_prompt(state: RequestState, chunk: ScheduledChunk) -> bool:
    """Whether this chunk's logits give the logprob of one of the request's prompt tokens not scored yet."""
    nxt = chunk.start_pos + len(chunk.token_ids)  # the index of the token these logits predict
    return (state.prompt_logprobs is not None and not chunk.samples and nxt < chunk.seq.num_prompt_tokens
            and len(state.prompt_logprobs) == nxt)


def record_prompt_logprobs(requests: Mapping[str, RequestState], chunks: list[ScheduledChunk],
                           logits: torch.Tensor) -> dict[str, str]:
    """Append each chunk's next prompt token's logprob (and top k) to its request; returns seq_id -> failure for
    rows whose logits were not finite."""
    failed: dict[str, str] = {}
    nxt = [c.seq.prompt_token_ids[c.start_pos + len(c.token_ids)] for c in chunks]
    ks = [requests[c.seq_id].params.prompt_logprobs or 0 for c in chunks]
    for c, lp in zip(chunks, prompt_token_logprobs(logits, nxt, ks)):
        scored = requests[c.seq_id].prompt_logprobs
        if lp is None:
            failed[c.seq_id] = NON_FINITE
        elif scored is not None:
            scored.append(lp)
    return failed
