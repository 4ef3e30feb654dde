"""Token sampling over a batch of logits: penalties, greedy, temperature, min-p, top-k, top-p,
per-request seeds, logprobs.

Each row is sampled with its own generator, so a seeded request draws the same tokens whatever else
is in the batch. Logprobs are the model's raw log-softmax (before penalties and filters), like vLLM.

Numerical safety: a row is sampled only if its logits are finite. The row is shifted so that its
maximum is exactly 0 before dividing by the temperature, so the most likely token always has weight
exp(0) = 1 and every filter keeps it: the probabilities can never be all zero, inf or NaN. A failure in
one row (non-finite logits or any exception) is reported for that row and the others still sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from engine.penalties import TokenHistory, apply_penalties
from engine.sampling_params import TOP_P_FLOOR, SamplingParams

_FLOAT32_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True)
class SampleResult:
    """Per row: the token id (None if the row failed), its logprobs, and the failure (None if it sampled)."""

    token_ids: list[int | None]
    logprobs: list[dict[int, float] | None]
    errors: list[str | None]


def top_k_mask(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the k largest logits of a 1-D tensor (ties at the boundary are kept), others -> -inf."""
    if top_k <= 0 or top_k >= logits.numel():
        return logits
    kth = torch.topk(logits, top_k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_mask(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability mass reaches top_p (always the most likely one)."""
    if top_p >= 1.0:
        return logits
    if top_p < TOP_P_FLOOR:
        return top_k_mask(logits, 1)
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= top_p
    drop_sorted[0] = False  # rounding must never drop the most likely token
    drop = torch.zeros_like(drop_sorted)
    drop[order] = drop_sorted
    return logits.masked_fill(drop, float("-inf"))


def min_p_mask(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens whose probability is below min_p times the most likely token's (which always stays)."""
    if min_p <= 0.0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(), float("-inf"))


def sample_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
               history: TokenHistory | None = None) -> int:
    """One token from a finite float32 row [V]."""
    logits = apply_penalties(logits, params, history)
    if params.is_greedy:
        return int(torch.argmax(logits).item())
    shifted = logits - logits.max()  # max is now exactly 0; far-below entries may become -inf (weight 0)
    # A finite divisor keeps -inf / t at -inf (inf / inf would be NaN).
    scaled = shifted / min(params.effective_temperature, _FLOAT32_MAX)
    scaled = min_p_mask(scaled, params.min_p)
    scaled = top_k_mask(scaled, params.top_k)
    scaled = top_p_mask(scaled, params.top_p)
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def row_logprobs(logits: torch.Tensor, chosen: int, k: int) -> dict[int, float]:
    # float64: finite for any finite float32 logits, however far apart.
    logp = torch.log_softmax(logits.double(), dim=-1)
    out: dict[int, float] = {}
    if k > 0:
        top = torch.topk(logp, min(k, logp.numel()))
        for value, index in zip(top.values.tolist(), top.indices.tolist()):
            out[int(index)] = float(value)
    out[chosen] = float(logp[chosen].item())
    return out


def sample_batch(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    histories: Sequence[TokenHistory | None] | None = None,
) -> SampleResult:
    """Sample one token per row of `logits` [S, V] (float32, CPU or GPU). `histories` (one per row) feed
    the penalties. Raises only for a malformed call; a row's own failure lands in `errors[row]`."""
    if histories is None:
        histories = [None] * len(params)
    if logits.dim() != 2 or not logits.shape[0] == len(params) == len(generators) == len(histories):
        raise ValueError(f"logits {tuple(logits.shape)} vs {len(params)} params / {len(generators)} generators"
                         f" / {len(histories)} histories")
    logits = logits.float().cpu()
    finite = torch.isfinite(logits).all(dim=-1).tolist()
    result = SampleResult(token_ids=[], logprobs=[], errors=[])
    for row, (p, g, h) in enumerate(zip(params, generators, histories)):
        tok: int | None = None
        lp: dict[int, float] | None = None
        error: str | None = None
        if not finite[row]:
            error = "the model produced non-finite logits (NaN or inf) for this request"
        else:
            try:
                tok = sample_row(logits[row], p, g, h)
                lp = row_logprobs(logits[row], tok, p.logprobs) if p.logprobs is not None else None
            except Exception as exc:  # noqa: BLE001 - any failure here belongs to this row alone
                tok, error = None, f"sampling failed: {type(exc).__name__}: {exc}"
        result.token_ids.append(tok)
        result.logprobs.append(lp)
        result.errors.append(error)
    return result
