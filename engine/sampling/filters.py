"""One sampling step over a batch of logits rows, as whole-batch tensor ops on the logits' device: penalties,
greedy, temperature, min-p, top-k, top-p, and the draw (the Gumbel-max trick with counter-based noise).

Numerical safety: a row is sampled only if its logits are finite (an invalid row gets id 0 and valid=False).
Each row is shifted so that its maximum is exactly 0 before dividing by the temperature, so the most likely
token always has weight exp(0) = 1 and every filter keeps it: a row can never lose all its tokens, and no
value is NaN. Filters keep ties at their boundary.
"""
from __future__ import annotations

import torch

from engine.sampling.noise import gumbel, row_hashes
from engine.sampling.penalties import PenaltyState
from engine.sampling.tensors import SamplingTensors

NEG_INF = float("-inf")


def sample_step(logits: torch.Tensor, t: SamplingTensors, counters: torch.Tensor, penalties: PenaltyState | None,
                token_hash: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int64 [S], valid bool [S]) for float `logits` [S, V]; `counters` (int64 [S]) is each row's number
    of generated tokens so far (the noise counter), `token_hash` the vocabulary's `noise.token_hashes`."""
    logits = logits.float()
    valid = torch.isfinite(logits).all(dim=-1)
    x = torch.where(valid[:, None], logits, 0.0)
    if penalties is not None and t.any_penalties:
        x = penalties.apply(x, t)
    ids = torch.argmax(x, dim=-1)  # ties: the smallest id, as the kernel's ARGMAX_REDUCE
    if t.any_sampled:
        drawn = torch.argmax(filtered(x, t) + gumbel(row_hashes(t.keys, counters), token_hash), dim=-1)
        ids = torch.where(t.greedy, ids, drawn)
    return torch.where(valid, ids, 0), valid


def filtered(x: torch.Tensor, t: SamplingTensors) -> torch.Tensor:
    """Each row shifted to max 0, divided by its temperature, and its min-p / top-k / top-p drops at -inf (in
    that order; top-p renormalises over what top-k kept)."""
    scaled = (x - x.max(dim=-1, keepdim=True).values) / t.temperature[:, None]
    if t.any_min_p:
        scaled = scaled.masked_fill(scaled < t.log_min_p[:, None], NEG_INF)
    if not (t.max_top_k or t.any_top_p):
        return scaled
    # Descending values: the whole row where top-p needs the mass of every token, else only the largest k.
    ordered = (torch.sort(scaled, dim=-1, descending=True).values if t.any_top_p
               else torch.topk(scaled, t.max_top_k, dim=-1).values)
    if t.max_top_k:
        index = (t.top_k.clamp(min=1) - 1).clamp(max=ordered.shape[1] - 1)
        kth = torch.where(t.top_k[:, None] > 0, ordered.gather(1, index[:, None]), NEG_INF)
        scaled = scaled.masked_fill(scaled < kth, NEG_INF)
        ordered = ordered.masked_fill(ordered < kth, NEG_INF)
    if t.any_top_p:
        probs = torch.softmax(ordered, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs  # non-decreasing: the kept tokens are a prefix
        kept = (mass_before < t.top_p[:, None]).sum(dim=-1).clamp(min=1)  # rounding never drops the first
        threshold = torch.where(t.top_p[:, None] < 1.0, ordered.gather(1, (kept - 1)[:, None]), NEG_INF)
        scaled = scaled.masked_fill(scaled < threshold, NEG_INF)
    return scaled


def step_logprobs(logits: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor,
                  k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's raw log-softmax (before penalties and filters, as vLLM): (chosen float64 [S], top values
    float64 [S, k], top ids int64 [S, k]). float64 keeps every value finite for finite float32 logits."""
    x = torch.where(valid[:, None], logits.double(), 0.0)
    logp = torch.log_softmax(x, dim=-1)
    chosen = logp.gather(1, ids[:, None]).squeeze(1)
    if k <= 0:
        empty = logp[:, :0]
        return chosen, empty, empty.long()
    top = torch.topk(logp, min(k, logp.shape[1]), dim=-1)
    return chosen, top.values, top.indices
