"""Sampling masks, seeds and logprobs on synthetic logits (no model)."""
from __future__ import annotations

import torch

from engine.sampler import row_logprobs, sample_batch, top_k_mask, top_p_mask
from engine.sampling_params import SamplingParams


def test_top_k_keeps_exactly_the_k_largest() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(100, generator=g)
        k = int(torch.randint(1, 99, (1,), generator=g))
        kept = torch.isfinite(top_k_mask(logits, k))
        assert kept.sum() == k
        assert set(torch.nonzero(kept).flatten().tolist()) == set(torch.topk(logits, k).indices.tolist())


def test_top_p_keeps_smallest_prefix_reaching_p() -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        logits = torch.randn(50, generator=g) * 3
        p = float(torch.rand(1, generator=g)) * 0.98 + 0.01
        kept = torch.isfinite(top_p_mask(logits, p))
        probs = torch.softmax(logits, -1)
        order = torch.argsort(probs, descending=True)
        n = int(kept.sum())
        assert set(order[:n].tolist()) == set(torch.nonzero(kept).flatten().tolist())
        assert probs[order[:n]].sum() >= p - 1e-6
        assert n == 1 or probs[order[: n - 1]].sum() < p


def test_seeded_sampling_reproduces_and_follows_the_distribution() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7]]))
    params = SamplingParams(temperature=1.0, seed=3)
    draws = [sample_batch(logits, [params], [torch.Generator().manual_seed(3)]).token_ids[0] for _ in range(5)]
    assert len(set(draws)) == 1
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(3)
    for _ in range(3000):
        counts[sample_batch(logits, [params], [gen]).token_ids[0]] += 1
    assert torch.allclose(counts / 3000, torch.tensor([0.1, 0.2, 0.7]), atol=0.03)


def test_greedy_and_top_k_1_pick_the_argmax() -> None:
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(5))
    gens = [torch.Generator().manual_seed(i) for i in range(4)]
    greedy = sample_batch(logits, [SamplingParams(temperature=0)] * 4, gens).token_ids
    top1 = sample_batch(logits, [SamplingParams(temperature=2.0, top_k=1)] * 4, gens).token_ids
    assert greedy == top1 == logits.argmax(-1).tolist()


def test_logprobs_contain_chosen_and_top_k() -> None:
    logits = torch.randn(40, generator=torch.Generator().manual_seed(9))
    lp = row_logprobs(logits, chosen=int(logits.argmin()), k=3)
    ref = torch.log_softmax(logits, -1)
    assert len(lp) == 4 and int(logits.argmin()) in lp
    for tok, value in lp.items():
        assert abs(value - ref[tok].item()) < 1e-6
