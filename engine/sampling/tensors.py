"""A batch's sampling settings as per-row tensors on the logits' device, so one step samples every row with a
fixed number of whole-batch tensor ops (no per-row Python, no host round trip)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.sampling.noise import split_keys
from engine.sampling_params import TOP_P_FLOOR, SamplingParams

FLOAT32_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True)
class SamplingTensors:
    """Row s samples with params[s]; the `any_*` flags let a step skip the filters no row uses."""

    greedy: torch.Tensor  # bool [S]
    temperature: torch.Tensor  # float32 [S]: the divisor (1 for greedy rows)
    log_min_p: torch.Tensor  # float32 [S]: keep tokens whose shifted, scaled logit is >= this (-inf: off)
    top_k: torch.Tensor  # int64 [S]: 0 = off
    top_p: torch.Tensor  # float32 [S]: 1 = off
    repetition: torch.Tensor  # float64 [S]: 1 = off
    frequency: torch.Tensor  # float64 [S]
    presence: torch.Tensor  # float64 [S]
    keys: torch.Tensor  # int64 [S, 2]: the noise keys' 32-bit words
    any_sampled: bool
    any_min_p: bool
    max_top_k: int  # 0: no row filters by top-k
    any_top_p: bool
    any_penalties: bool
    logprobs_k: int  # the most top logprobs any row asks for; -1: no row asks for logprobs

    @staticmethod
    def build(params: list[SamplingParams], keys: list[int], vocab: int, device: torch.device) -> SamplingTensors:
        rows = list(zip(params, keys))
        greedy = [p.is_greedy for p in params]
        top_k = [_top_k(p, vocab) for p in params]
        top_p = [1.0 if p.is_greedy or p.top_p < TOP_P_FLOOR else p.top_p for p in params]
        log_min_p = [-math.inf if p.is_greedy or p.min_p <= 0.0 else math.log(p.min_p) for p in params]

        def f32(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)

        def f64(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float64, device=device)

        return SamplingTensors(
            greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
            temperature=f32([1.0 if p.is_greedy else min(p.effective_temperature, FLOAT32_MAX) for p in params]),
            log_min_p=f32(log_min_p),
            top_k=torch.tensor(top_k, dtype=torch.int64, device=device),
            top_p=f32(top_p),
            repetition=f64([p.repetition_penalty for p in params]),
            frequency=f64([p.frequency_penalty for p in params]),
            presence=f64([p.presence_penalty for p in params]),
            keys=split_keys([k for _p, k in rows], device),
            any_sampled=not all(greedy),
            any_min_p=any(v > -math.inf for v in log_min_p),
            max_top_k=max(top_k),
            any_top_p=any(v < 1.0 for v in top_p),
            any_penalties=any(p.has_penalties for p in params),
            logprobs_k=max((p.logprobs for p in params if p.logprobs is not None), default=-1),
        )


def _top_k(p: SamplingParams, vocab: int) -> int:
    """The row's top-k (0: off). A top_p below the float32 floor keeps the most likely token alone: top-k 1."""
    if p.is_greedy:
        return 0
    if p.top_p < TOP_P_FLOOR:
        return 1
    return p.top_k if 0 < p.top_k < vocab else 0
