"""min_tokens as one torch op on the logits' device: while a row has fewer generated tokens than its min_tokens,
its stop ids (every EOS id, even with ignore_eos, and its stop_token_ids: vLLM's all_stop_token_ids) get the
lowest finite logit before penalties, filters and the draw, so neither greedy nor a sampled row can pick one.

The masked value is the dtype's lowest finite number, not vLLM's -inf: both samplers call a row with a non-finite
logit invalid (filters.sample_step's NaN guard, the kernel's first pass), and a penalised logit already reaches that
bound (penalties clamp to float32's range), so every later op handles it; its weight exp(lowest - max) is 0 at any
temperature and argmax never picks it while another token is finite. Logprobs stay those of the raw logits (vLLM's
raw_logprobs): the caller keeps the unmasked tensor for them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.sampling_params import SamplingParams


def stop_ids(params: SamplingParams, eos_ids: Sequence[int], vocab: int) -> list[int]:
    """The ids min_tokens holds back for `params`: EOS (whatever ignore_eos says), then its stop ids, each once;
    ids past the vocabulary are no token the model can produce."""
    return [t for t in dict.fromkeys([*eos_ids, *params.stop_token_ids]) if 0 <= t < vocab]


@dataclass(frozen=True)
class MinTokensMask:
    """Per row its stop ids (`ids` int64 [S, K], a short row padded with its first id: writing one id twice writes
    the same value) and its min_tokens (`min_tokens` int64 [S]; 0 for a row without stop ids). `steps`: from counters
    at the build, how many steps of a run can mask anything (counters grow by one a step), so later ones skip it."""

    ids: torch.Tensor
    min_tokens: torch.Tensor
    steps: int

    @staticmethod
    def build(params: Sequence[SamplingParams], eos_ids: Sequence[int], counters: Sequence[int], vocab: int,
              device: torch.device) -> MinTokensMask | None:
        """None where no row masks anything in this run: the sampler then does no extra work."""
        per_row = [stop_ids(p, eos_ids, vocab) for p in params]
        mins = [p.min_tokens if ids else 0 for p, ids in zip(params, per_row)]
        steps = max((m - c for m, c in zip(mins, counters)), default=0)
        if steps <= 0:
            return None
        k = max(len(ids) for ids in per_row)
        padded = [ids + [ids[0]] * (k - len(ids)) if ids else [0] * k for ids in per_row]
        return MinTokensMask(ids=torch.tensor(padded, dtype=torch.int64, device=device),
                             min_tokens=torch.tensor(mins, dtype=torch.int64, device=device), steps=steps)

    def apply(self, logits: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
        """A copy of `logits` [S, V] whose rows below their min_tokens (`counters`: generated tokens per row, on the
        device) have their stop ids at the lowest finite value; the others' values unchanged. No host sync."""
        below = (counters < self.min_tokens)[:, None]
        kept = logits.gather(1, self.ids)
        lowest = torch.finfo(logits.dtype).min
        return logits.scatter(1, self.ids, torch.where(below, torch.full_like(kept, lowest), kept))
