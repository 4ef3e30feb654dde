"""Repetition, frequency and presence penalties for a batch of rows, from device-resident token counts.

Semantics follow vLLM: repetition_penalty (HF) over prompt + generated tokens divides positive logits and
multiplies negative ones; then frequency_penalty * count and presence_penalty * (count > 0) are subtracted,
counting generated tokens only (OpenAI). The counts live on the logits' device and each sampled token is
added there, so a run of decode steps applies penalties without the host.

The arithmetic runs in float64 and the result is clamped to float32's finite range: an accepted
repetition_penalty may be as small as a denormal or as large as 1e308, and in float32 those would turn
logits into inf or NaN.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.sampling.tensors import FLOAT32_MAX, SamplingTensors


@dataclass(frozen=True)
class TokenHistory:
    """The token ids a request has seen so far (read, never modified)."""

    prompt: Sequence[int]
    output: Sequence[int]


class PenaltyState:
    """Per row: which tokens the prompt or the output holds (`seen`, bool [S, V]) and how often each was
    generated (`counts`, int32 [S, V])."""

    def __init__(self, seen: torch.Tensor, counts: torch.Tensor) -> None:
        self.seen, self.counts = seen, counts

    @staticmethod
    def build(histories: Sequence[TokenHistory], vocab: int, device: torch.device) -> PenaltyState:
        rows_seen: list[int] = []
        ids_seen: list[int] = []
        rows_out: list[int] = []
        ids_out: list[int] = []
        for row, h in enumerate(histories):
            ids_seen.extend(h.prompt)
            ids_seen.extend(h.output)
            rows_seen.extend([row] * (len(h.prompt) + len(h.output)))
            ids_out.extend(h.output)
            rows_out.extend([row] * len(h.output))
        S = len(histories)
        seen = torch.zeros((S, vocab), dtype=torch.bool, device=device)
        counts = torch.zeros((S, vocab), dtype=torch.int32, device=device)
        if ids_seen:
            seen[_long(rows_seen, device), _long(ids_seen, device)] = True
        if ids_out:
            counts.index_put_((_long(rows_out, device), _long(ids_out, device)),
                              torch.ones(len(ids_out), dtype=torch.int32, device=device), accumulate=True)
        return PenaltyState(seen, counts)

    def apply(self, logits: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
        """float32 [S, V] finite `logits` with each row's penalties (rows without any come back unchanged)."""
        out = logits.double()
        penalty = t.repetition[:, None]
        repeated = torch.where(out > 0, out / penalty, out * penalty)
        out = torch.where(self.seen, repeated, out)
        counts = self.counts.double()
        out = out - t.frequency[:, None] * counts - t.presence[:, None] * (counts > 0).double()
        return out.clamp(-FLOAT32_MAX, FLOAT32_MAX).float()

    def record(self, ids: torch.Tensor) -> None:
        """Row s generated ids[s] (on the device, in place)."""
        rows = torch.arange(ids.numel(), device=ids.device)
        ids = ids.long()
        self.seen[rows, ids] = True
        self.counts[rows, ids] += 1


def _long(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=device)
