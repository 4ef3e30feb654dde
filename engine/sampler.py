"""Token sampling over a batch of logits: greedy, temperature, top-k, top-p, per-request seeds, logprobs.

Each row is sampled with its own generator, so a seeded request draws the same tokens whatever else
is in the batch. Logprobs are the model's raw log-softmax (before temperature/top-k/top-p), like vLLM.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class SampleResult:
    token_ids: list[int]
    logprobs: list[dict[int, float] | None]


def top_k_mask(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the k largest logits of a 1-D tensor (ties at the boundary are kept), others -> -inf."""
    if top_k <= 0 or top_k >= logits.numel():
        return logits
    kth = torch.topk(logits, top_k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_mask(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability mass reaches top_p (at least one)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= top_p  # the first token always has mass_before == 0 < top_p
    drop = torch.zeros_like(drop_sorted)
    drop[order] = drop_sorted
    return logits.masked_fill(drop, float("-inf"))


def sample_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    if params.is_greedy:
        return int(torch.argmax(logits).item())
    scaled = logits / params.temperature
    scaled = top_k_mask(scaled, params.top_k)
    scaled = top_p_mask(scaled, params.top_p)
    probs = torch.softmax(scaled, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def row_logprobs(logits: torch.Tensor, chosen: int, k: int) -> dict[int, float]:
    logp = torch.log_softmax(logits.float(), dim=-1)
    out: dict[int, float] = {}
    if k > 0:
        top = torch.topk(logp, k)
        for value, index in zip(top.values.tolist(), top.indices.tolist()):
            out[int(index)] = float(value)
    out[chosen] = float(logp[chosen].item())
    return out


def sample_batch(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> SampleResult:
    """Sample one token per row of `logits` [S, V] (float32, CPU or GPU)."""
    if logits.dim() != 2 or logits.shape[0] != len(params) or len(params) != len(generators):
        raise ValueError(f"logits {tuple(logits.shape)} vs {len(params)} params / {len(generators)} generators")
    logits = logits.float().cpu()
    token_ids: list[int] = []
    logprobs: list[dict[int, float] | None] = []
    for row, (p, g) in enumerate(zip(params, generators)):
        tok = sample_row(logits[row], p, g)
        token_ids.append(tok)
        logprobs.append(row_logprobs(logits[row], tok, p.logprobs) if p.logprobs is not None else None)
    return SampleResult(token_ids=token_ids, logprobs=logprobs)
