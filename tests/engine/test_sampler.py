"""Sampling masks, seeds and logprobs on synthetic logits (no model)."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import sampler
from engine.penalties import TokenHistory
from engine.sampler import min_p_mask, row_logprobs, sample_batch, top_k_mask, top_p_mask
from engine.sampling_params import MAX_LOGPROBS, SamplingParams


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


def test_top_p_below_the_floor_keeps_only_the_most_likely_token() -> None:
    logits = torch.tensor([0.1, 2.0, 1.9, -3.0])
    for p in (1e-46, 1e-9):
        assert torch.isfinite(top_p_mask(logits, p)).tolist() == [False, True, False, False]
    flat = torch.zeros(5)  # every token equally likely: rounding must still leave one
    assert int(torch.isfinite(top_p_mask(flat, 1e-7)).sum()) >= 1


def test_min_p_keeps_tokens_above_a_fraction_of_the_top_probability() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isfinite(min_p_mask(logits, 0.5)).tolist() == [True, True, False, False]
    assert torch.isfinite(min_p_mask(logits, 1.0)).tolist() == [True, False, False, False]
    assert torch.isfinite(min_p_mask(logits, 0.0)).all()


@pytest.mark.parametrize("temperature", [1e-45, 1e-39, 1e-6, 1e-5, 1e-3, 1e300])
def test_extreme_temperatures_sample_a_valid_token(temperature: float) -> None:
    logits = torch.tensor([[1e30, -1e30, 3e38, -3e38, 0.0]])
    out = sample_batch(logits, [SamplingParams(temperature=temperature)], [torch.Generator().manual_seed(0)])
    assert out.errors == [None]
    if temperature < 1e-2:  # greedy or clamped to 1e-2: the 3e38 logit dominates completely
        assert out.token_ids == [2]


def test_a_non_finite_row_fails_alone() -> None:
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    logits[1, 4] = float("nan")
    params = [SamplingParams(temperature=0.8, seed=1)] * 3
    out = sample_batch(logits, params, [torch.Generator().manual_seed(1) for _ in range(3)])
    assert out.token_ids[1] is None and "non-finite" in (out.errors[1] or "")
    assert out.errors[0] is None and out.errors[2] is None
    assert all(isinstance(t, int) for t in (out.token_ids[0], out.token_ids[2]))


def test_an_exception_in_one_row_fails_that_row_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sampler.sample_row

    def flaky(logits, params, generator, history=None):  # type: ignore[no-untyped-def]
        if params.seed == 666:
            raise RuntimeError("boom\nsecond line")
        return real(logits, params, generator, history)

    monkeypatch.setattr(sampler, "sample_row", flaky)
    logits = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    out = sample_batch(logits, [SamplingParams(seed=666), SamplingParams(temperature=0)], [None, None])
    assert out.token_ids == [None, int(logits[1].argmax())]
    assert out.errors[0] is not None and "boom" in out.errors[0] and out.errors[1] is None


_VOCAB = 12
_unit = st.floats(min_value=0.0, max_value=1.0)
_params = st.builds(
    SamplingParams,
    temperature=st.one_of(st.floats(min_value=0.0, max_value=1e300), st.sampled_from([1e-45, 1e-39, 1e-5, 1e-2])),
    top_p=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    top_k=st.integers(min_value=-1, max_value=_VOCAB + 3),
    min_p=_unit,
    presence_penalty=st.floats(min_value=-2.0, max_value=2.0),
    frequency_penalty=st.floats(min_value=-2.0, max_value=2.0),
    repetition_penalty=st.floats(min_value=0.0, max_value=1e300, exclude_min=True),
    seed=st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**64 - 1)),
    logprobs=st.one_of(st.none(), st.integers(min_value=0, max_value=MAX_LOGPROBS)),
)
_finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(_params, st.lists(_finite32, min_size=_VOCAB, max_size=_VOCAB),
                            st.lists(st.integers(0, _VOCAB - 1), max_size=6),
                            st.lists(st.integers(0, _VOCAB - 1), max_size=6)),
                  min_size=1, max_size=4),
)
def test_any_accepted_params_sample_valid_tokens_and_finite_logprobs(rows) -> None:  # type: ignore[no-untyped-def]
    params = [p for p, _l, _pr, _o in rows]
    logits = torch.tensor([l for _p, l, _pr, _o in rows], dtype=torch.float32)
    histories = [TokenHistory(prompt=pr, output=o) for _p, _l, pr, o in rows]
    gens = [torch.Generator().manual_seed(p.seed if p.seed is not None else 0) for p in params]
    out = sample_batch(logits, params, gens, histories)
    assert out.errors == [None] * len(rows)
    for p, tok, lp in zip(params, out.token_ids, out.logprobs):
        assert isinstance(tok, int) and 0 <= tok < _VOCAB
        if p.logprobs is None:
            assert lp is None
        else:
            assert lp is not None and tok in lp and all(math.isfinite(v) for v in lp.values())
