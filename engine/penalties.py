"""Repetition, frequency and presence penalties on one row of logits, from the request's token history.

Semantics follow vLLM: repetition_penalty (HF) over prompt + generated tokens divides positive logits
and multiplies negative ones; then frequency_penalty * count and presence_penalty * (count > 0) are
subtracted, counting generated tokens only (OpenAI).

The arithmetic runs in float64 and the result is clamped to float32's finite range: an accepted
repetition_penalty may be as small as a denormal or as large as 1e308, and in float32 those would
turn logits into inf or NaN.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from engine.sampling_params import SamplingParams

_FLOAT32_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True)
class TokenHistory:
    """The token ids a request has seen so far (read, never modified)."""

    prompt: Sequence[int]
    output: Sequence[int]


def apply_penalties(logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None) -> torch.Tensor:
    """`logits` [V] float32 (finite) with the request's penalties applied; the same tensor if it has none."""
    if not params.has_penalties or history is None:
        return logits
    vocab = logits.numel()
    out = logits.double()
    output_ids = torch.as_tensor(list(history.output), dtype=torch.long)
    if params.repetition_penalty != 1.0:
        seen = torch.zeros(vocab, dtype=torch.bool)
        seen[torch.as_tensor(list(history.prompt), dtype=torch.long)] = True
        seen[output_ids] = True
        penalty = params.repetition_penalty
        out = torch.where(seen, torch.where(out > 0, out / penalty, out * penalty), out)
    if params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
        counts = torch.bincount(output_ids, minlength=vocab).double()
        out = out - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).double()
    return out.clamp(-_FLOAT32_MAX, _FLOAT32_MAX).float()
