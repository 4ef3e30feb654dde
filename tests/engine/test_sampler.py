"""Sampling filters, seeds and logprobs on synthetic logits (no model)."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sampling import run_sampler
from engine.sampling.filters import filtered
from engine.sampling.noise import KEY_END, mix32, seed_key
from engine.sampling.penalties import TokenHistory
from engine.sampling.results import sample_batch
from engine.sampling.tensors import SamplingTensors
from engine.sampling_params import MAX_LOGPROBS, SamplingParams


def _kept(logits: torch.Tensor, **kw: float) -> torch.Tensor:
    """Which tokens of a 1-D row survive the filters of SamplingParams(**kw)."""
    t = SamplingTensors.build([SamplingParams(**kw)], [0], logits.numel(), logits.device)
    return torch.isfinite(filtered(logits[None].float(), t))[0]


def test_top_k_keeps_exactly_the_k_largest() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(100, generator=g)
        k = int(torch.randint(1, 99, (1,), generator=g))
        kept = _kept(logits, top_k=k)
        assert kept.sum() == k
        assert set(torch.nonzero(kept).flatten().tolist()) == set(torch.topk(logits, k).indices.tolist())


def test_top_p_keeps_smallest_prefix_reaching_p() -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        logits = torch.randn(50, generator=g) * 3
        p = float(torch.rand(1, generator=g)) * 0.98 + 0.01
        kept = _kept(logits, top_p=p)
        probs = torch.softmax(logits, -1)
        order = torch.argsort(probs, descending=True)
        n = int(kept.sum())
        assert set(order[:n].tolist()) == set(torch.nonzero(kept).flatten().tolist())
        assert probs[order[:n]].sum() >= p - 1e-6
        assert n == 1 or probs[order[: n - 1]].sum() < p


def test_top_p_renormalises_over_what_top_k_kept() -> None:
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    # top-k 2 leaves 0.4 and 0.3 (4/7 and 3/7): top-p 0.5 then keeps only the first.
    assert _kept(logits, top_k=2, top_p=0.5).tolist() == [True, False, False, False]
    assert _kept(logits, top_k=3, top_p=0.5).tolist() == [True, True, False, False]


def test_seeded_sampling_reproduces_and_follows_the_distribution() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7]]))
    params = SamplingParams(temperature=1.0, seed=3)
    draws = [sample_batch(logits, [params], [seed_key(3)], counters=[5]).token_ids[0] for _ in range(5)]
    assert len(set(draws)) == 1
    counts = torch.zeros(3)
    for counter in range(3000):  # one request's successive tokens
        counts[sample_batch(logits, [params], [seed_key(3)], counters=[counter]).token_ids[0]] += 1
    assert torch.allclose(counts / 3000, torch.tensor([0.1, 0.2, 0.7]), atol=0.03)


def test_a_row_draws_the_same_alone_as_in_any_batch() -> None:
    logits = torch.randn(5, 64, generator=torch.Generator().manual_seed(2))
    params = [SamplingParams(temperature=1.5, top_p=0.9, min_p=0.01, top_k=40)] * 5
    keys, counters = [11, 12, 13, 14, 15], [0, 3, 9, 2, 7]
    batch = sample_batch(logits, params, keys, counters=counters).token_ids
    alone = [sample_batch(logits[i:i + 1], params[i:i + 1], keys[i:i + 1], counters=counters[i:i + 1]).token_ids[0]
             for i in range(5)]
    assert batch == alone


def test_noise_hash_is_the_32_bit_hash_the_gpu_computes() -> None:
    """The int64 tensor arithmetic equals plain 32-bit unsigned arithmetic (what a CUDA port computes)."""
    def reference(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)

    values = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 123456789, 0xDEADBEEF]
    assert mix32(torch.tensor(values, dtype=torch.int64)).tolist() == [reference(v) for v in values]
    assert seed_key(-1) == KEY_END - 1 and seed_key(2**64 - 1) == KEY_END - 1


def test_greedy_and_top_k_1_pick_the_argmax() -> None:
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(5))
    keys = [0, 1, 2, 3]
    greedy = sample_batch(logits, [SamplingParams(temperature=0)] * 4, keys).token_ids
    top1 = sample_batch(logits, [SamplingParams(temperature=2.0, top_k=1)] * 4, keys).token_ids
    assert greedy == top1 == logits.argmax(-1).tolist()


def test_logprobs_contain_chosen_and_top_k() -> None:
    logits = torch.randn(1, 40, generator=torch.Generator().manual_seed(9))
    out = sample_batch(logits, [SamplingParams(temperature=5.0, logprobs=3)], [7])
    lp, chosen = out.logprobs[0], out.token_ids[0]
    ref = torch.log_softmax(logits[0].double(), -1)
    assert lp is not None and chosen in lp and len(lp) in (3, 4)
    assert set(torch.topk(ref, 3).indices.tolist()) <= set(lp)
    for tok, value in lp.items():
        assert abs(value - ref[tok].item()) < 1e-9


def test_top_p_below_the_floor_keeps_only_the_most_likely_token() -> None:
    logits = torch.tensor([0.1, 2.0, 1.9, -3.0])
    for p in (1e-46, 1e-9):
        assert _kept(logits, top_p=p).tolist() == [False, True, False, False]
    assert int(_kept(torch.zeros(5), top_p=1e-7).sum()) >= 1  # every token equally likely: one must stay


def test_min_p_keeps_tokens_above_a_fraction_of_the_top_probability() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert _kept(logits, min_p=0.5).tolist() == [True, True, False, False]
    assert _kept(logits, min_p=1.0).tolist() == [True, False, False, False]
    assert _kept(logits, min_p=0.0).all()


@pytest.mark.parametrize("temperature", [1e-45, 1e-39, 1e-6, 1e-5, 1e-3, 1e300])
def test_extreme_temperatures_sample_a_valid_token(temperature: float) -> None:
    logits = torch.tensor([[1e30, -1e30, 3e38, -3e38, 0.0]])
    out = sample_batch(logits, [SamplingParams(temperature=temperature)], [0])
    assert out.errors == [None]
    if temperature < 1e-2:  # greedy or clamped to 1e-2: the 3e38 logit dominates completely
        assert out.token_ids == [2]


def test_a_non_finite_row_fails_alone() -> None:
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    logits[1, 4] = float("nan")
    out = sample_batch(logits, [SamplingParams(temperature=0.8, seed=1)] * 3, [1, 1, 1])
    assert out.token_ids[1] is None and "non-finite" in (out.errors[1] or "")
    assert out.errors[0] is None and out.errors[2] is None
    assert all(isinstance(t, int) for t in (out.token_ids[0], out.token_ids[2]))


def test_an_exception_in_one_row_fails_that_row_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = run_sampler.sample_step

    def flaky(logits, t, counters, penalties, token_hash):  # type: ignore[no-untyped-def]
        if bool((t.keys[:, 0] == 666).any()):
            raise RuntimeError("boom\nsecond line")
        return real(logits, t, counters, penalties, token_hash)

    monkeypatch.setattr(run_sampler, "sample_step", flaky)
    logits = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    out = sample_batch(logits, [SamplingParams(seed=666), SamplingParams(temperature=0)], [666, 1])
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
    counter=st.integers(min_value=0, max_value=2**40),
)
def test_any_accepted_params_sample_valid_tokens_and_finite_logprobs(rows, counter) -> None:  # type: ignore[no-untyped-def]
    params = [p for p, _l, _pr, _o in rows]
    logits = torch.tensor([l for _p, l, _pr, _o in rows], dtype=torch.float32)
    histories = [TokenHistory(prompt=pr, output=o) for _p, _l, pr, o in rows]
    keys = [seed_key(p.seed if p.seed is not None else 0) for p in params]
    out = sample_batch(logits, params, keys, histories, [counter] * len(rows))
    assert out.errors == [None] * len(rows)
    for p, tok, lp in zip(params, out.token_ids, out.logprobs):
        assert isinstance(tok, int) and 0 <= tok < _VOCAB
        if p.logprobs is None:
            assert lp is None
        else:
            assert lp is not None and tok in lp and all(math.isfinite(v) for v in lp.values())
