"""Penalties against small hand-computed examples, and their effect on greedy picks."""
from __future__ import annotations

import torch

from engine.sampling.penalties import PenaltyState, TokenHistory
from engine.sampling.results import sample_batch
from engine.sampling.tensors import SamplingTensors
from engine.sampling_params import SamplingParams

LOGITS = torch.tensor([2.0, -1.0, 0.5, 3.0])
# Token 0 only in the prompt; token 1 generated twice, token 2 once; token 3 never seen.
HISTORY = TokenHistory(prompt=[0], output=[1, 1, 2])


def _apply(logits: torch.Tensor, params: SamplingParams, history: TokenHistory) -> torch.Tensor:
    t = SamplingTensors.build([params], [0], logits.numel(), logits.device)
    return PenaltyState.build([history], logits.numel(), logits.device).apply(logits[None], t)[0]


def _pen(**kw: float) -> list[float]:
    return _apply(LOGITS, SamplingParams(**kw), HISTORY).tolist()


def test_repetition_penalty_divides_positive_and_multiplies_negative_over_prompt_and_output() -> None:
    assert _pen(repetition_penalty=2.0) == [1.0, -2.0, 0.25, 3.0]
    assert _pen(repetition_penalty=0.5) == [4.0, -0.5, 1.0, 3.0]


def test_frequency_and_presence_count_generated_tokens_only() -> None:
    assert _pen(frequency_penalty=0.5) == [2.0, -2.0, 0.0, 3.0]
    assert _pen(presence_penalty=0.25) == [2.0, -1.25, 0.25, 3.0]
    assert _pen(frequency_penalty=-1.0) == [2.0, 1.0, 1.5, 3.0]


def test_all_three_apply_repetition_first() -> None:
    got = _pen(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    assert got == [1.0, -3.25, -0.5, 3.0]


def test_no_penalty_leaves_the_logits_unchanged() -> None:
    assert _pen() == LOGITS.tolist()


def test_recorded_tokens_count_like_history() -> None:
    state = PenaltyState.build([TokenHistory(prompt=[0], output=[1])], 4, torch.device("cpu"))
    state.record(torch.tensor([1]))
    state.record(torch.tensor([2]))
    assert state.counts[0].tolist() == [0, 2, 1, 0] and state.seen[0].tolist() == [True, True, True, False]


def test_extreme_repetition_penalties_stay_finite() -> None:
    for penalty in (5e-324, 1e-46, 1e300):
        out = _apply(torch.tensor([1e30, -1e30, 0.0, 3.0]), SamplingParams(repetition_penalty=penalty),
                     TokenHistory(prompt=[0, 1, 2, 3], output=[]))
        assert torch.isfinite(out).all() and out.dtype == torch.float32


def test_greedy_uses_the_penalised_logits() -> None:
    logits = torch.tensor([[5.0, 4.0]])
    history = [TokenHistory(prompt=[1], output=[0])]
    assert sample_batch(logits, [SamplingParams(temperature=0)], [0], history).token_ids == [0]
    penalised = sample_batch(logits, [SamplingParams(temperature=0, frequency_penalty=2.0)], [0], history)
    assert penalised.token_ids == [1]
    # logprobs stay the raw model log-softmax, whatever the penalties did.
    with_lp = sample_batch(logits, [SamplingParams(temperature=0, frequency_penalty=2.0, logprobs=1)], [0], history)
    raw = torch.log_softmax(logits[0].double(), -1)
    assert with_lp.logprobs[0] == {0: raw[0].item(), 1: raw[1].item()}
