"""min_tokens without a model: validation, the stop-id mask of single steps (sample_batch) and of runs (RunSampler),
greedy and sampled, EOS and stop ids, rows with and without it in one batch, the count crossing min_tokens inside a
run, raw logprobs, the in-kernel argmax shortcut, the stop-string rule and the device's stop rules."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.decode_runs import kernel_samples
from engine.detokenizer import OutputText
from engine.errors import RequestError
from engine.run_stops import run_stops
from engine.sampling.min_tokens import MinTokensMask, stop_ids
from engine.sampling.noise import seed_key
from engine.sampling.results import sample_batch, to_host
from engine.sampling.run_sampler import NoiseTables, RunSampler
from engine.sampling.penalties import TokenHistory
from engine.sampling_params import SamplingParams

VOCAB = 16
EOS = (3, 7)
STOP = 11
GREEDY = SamplingParams(temperature=0.0, max_tokens=20)
SAMPLED = SamplingParams(temperature=1.0, max_tokens=20)


def _logits(rows: int, favourite: int, others: tuple[int, ...] = ()) -> torch.Tensor:
    """Rows whose argmax is `favourite` by far (it would be drawn at temperature 1 almost surely), then `others`."""
    x = torch.zeros((rows, VOCAB))
    x[:, favourite] = 30.0
    for i, t in enumerate(others):
        x[:, t] = 20.0 - i
    return x


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("kw", [dict(min_tokens=-1), dict(min_tokens=1.0), dict(min_tokens=True), dict(min_tokens="2"),
                                dict(min_tokens=17, max_tokens=16), dict(min_tokens=2, max_tokens=1)])
def test_bad_min_tokens_is_one_line_naming_the_field(kw: dict[str, object]) -> None:
    with pytest.raises(RequestError) as info:
        SamplingParams(**kw)  # type: ignore[arg-type]
    assert str(info.value).startswith("min_tokens") and "\n" not in str(info.value)


def test_min_tokens_defaults_to_zero_and_may_equal_max_tokens() -> None:
    assert SamplingParams().min_tokens == 0
    p = SamplingParams(min_tokens=16, max_tokens=16)
    assert p.holds_stops(15) and not p.holds_stops(16)


def test_stop_ids_are_eos_even_with_ignore_eos_then_stop_ids_in_the_vocabulary() -> None:
    p = SamplingParams(ignore_eos=True, stop_token_ids=[STOP, 3, 10**6])
    assert stop_ids(p, EOS, VOCAB) == [3, 7, STOP]


# ---------------------------------------------------------------- single steps
@pytest.mark.parametrize("params", [GREEDY, SAMPLED])
def test_a_step_below_min_tokens_never_draws_eos_and_draws_it_from_min_tokens_on(params: SamplingParams) -> None:
    p = SamplingParams(**{**params.__dict__, "min_tokens": 3})
    logits = _logits(1, favourite=7, others=(3, 5))
    for counter in range(3):
        for key in range(20):
            tok = sample_batch(logits, [p], [seed_key(key)], counters=[counter], eos_ids=EOS).token_ids[0]
            assert tok == 5  # EOS 7 and EOS 3 held back: the best other token
    assert sample_batch(logits, [p], [0], counters=[3], eos_ids=EOS).token_ids[0] == 7


@pytest.mark.parametrize("params", [GREEDY, SAMPLED])
def test_stop_ids_are_held_back_and_rows_without_min_tokens_are_untouched(params: SamplingParams) -> None:
    held = SamplingParams(**{**params.__dict__, "min_tokens": 2, "stop_token_ids": (STOP,)})
    free = SamplingParams(**{**params.__dict__, "stop_token_ids": (STOP,)})
    logits = _logits(4, favourite=STOP, others=(7, 2))
    result = sample_batch(logits, [held, free, held, free], [1, 2, 3, 4], counters=[0, 0, 2, 5], eos_ids=EOS)
    assert result.token_ids == [2, STOP, STOP, STOP]
    assert result.errors == [None] * 4


def test_ignore_eos_still_holds_eos_back_below_min_tokens() -> None:
    p = SamplingParams(temperature=0.0, ignore_eos=True, min_tokens=1)
    assert sample_batch(_logits(1, favourite=3, others=(9,)), [p], [0], eos_ids=EOS).token_ids[0] == 9


def test_penalties_and_filters_apply_to_the_masked_row() -> None:
    """The mask comes first: top-k 1 then keeps the best token that is not a stop id, and penalties see a finite
    row (a row with an infinite logit would be failed as non-finite)."""
    p = SamplingParams(temperature=1.0, top_k=1, repetition_penalty=1.5, frequency_penalty=2.0, min_tokens=1,
                       max_tokens=4)
    logits = _logits(1, favourite=7, others=(3, 4))
    result = sample_batch(logits, [p], [0], [TokenHistory((7,), (7, 4))], eos_ids=EOS)
    assert result.token_ids == [4] and result.errors == [None]


def test_logprobs_are_the_raw_distributions() -> None:
    """vLLM's raw logprobs: the held-back EOS keeps its own logprob among the top ones, the chosen token its raw one."""
    p = SamplingParams(temperature=0.0, min_tokens=1, logprobs=2)
    logits = _logits(1, favourite=7, others=(5,))
    result = sample_batch(logits, [p], [0], eos_ids=EOS)
    raw = torch.log_softmax(logits[0].double(), -1)
    assert result.token_ids == [5]
    assert set(result.logprobs[0]) == {7, 5}
    assert result.logprobs[0][7] == pytest.approx(float(raw[7]))
    assert result.logprobs[0][5] == pytest.approx(float(raw[5]))


def test_no_mask_is_built_when_no_row_waits() -> None:
    assert MinTokensMask.build([GREEDY, SAMPLED], EOS, [0, 0], VOCAB, torch.device("cpu")) is None
    done = SamplingParams(min_tokens=2)
    assert MinTokensMask.build([done], EOS, [2], VOCAB, torch.device("cpu")) is None
    assert MinTokensMask.build([done], (), [0], VOCAB, torch.device("cpu")) is None  # no stop id to hold back
    mask = MinTokensMask.build([done, GREEDY], EOS, [0, 0], VOCAB, torch.device("cpu"))
    assert mask is not None and mask.steps == 2


def test_the_mask_only_lowers_stop_ids_and_keeps_the_row_finite() -> None:
    p = SamplingParams(min_tokens=1, stop_token_ids=(STOP,))
    mask = MinTokensMask.build([p, GREEDY], EOS, [0, 0], VOCAB, torch.device("cpu"))
    assert mask is not None
    logits = torch.randn(2, VOCAB)
    out = mask.apply(logits, torch.tensor([0, 0]))
    assert torch.isfinite(out).all()
    lowered = [i for i in range(VOCAB) if out[0, i] != logits[0, i]]
    assert lowered == [3, 7, STOP] and bool((out[0, lowered] == torch.finfo(torch.float32).min).all())
    assert torch.equal(out[1], logits[1])


# ---------------------------------------------------------------- runs
def _run(params: list[SamplingParams], counters: list[int], logits: torch.Tensor, steps: int) -> list[list[int]]:
    sampler = RunSampler(params, list(range(len(params))), [TokenHistory((), ())] * len(params), counters, steps,
                         NoiseTables(VOCAB), torch.device("cpu"), eos_ids=EOS)
    for i in range(steps):
        sampler.step(logits, i)
    return to_host(sampler.chunk(0, steps))["ids"].tolist()


@pytest.mark.parametrize("params", [GREEDY, SAMPLED])
def test_a_run_holds_stop_ids_back_until_each_row_reaches_min_tokens(params: SamplingParams) -> None:
    """Rows cross their min_tokens at different steps of one run (from different counts before it); a row without
    min_tokens draws EOS from the first step."""
    p = SamplingParams(**{**params.__dict__, "min_tokens": 4, "stop_token_ids": (STOP,)})
    logits = _logits(3, favourite=7, others=(STOP, 2))
    steps = _run([p, p, params], [0, 2, 0], logits, 6)
    by_row = [list(row) for row in zip(*steps)]
    assert by_row[0] == [2, 2, 2, 2, 7, 7]  # tokens 1-4 held back, the 5th may be EOS
    assert by_row[1] == [2, 2, 7, 7, 7, 7]  # 2 before the run: its tokens 3 and 4 held back
    assert by_row[2] == [7] * 6


def test_a_run_whose_rows_wait_for_no_stop_skips_the_mask() -> None:
    sampler = RunSampler([SamplingParams(min_tokens=1)], [0], [TokenHistory((), ())], [1], 2, NoiseTables(VOCAB),
                         torch.device("cpu"), eos_ids=EOS)
    assert sampler.min_tokens is None


# ---------------------------------------------------------------- routing and stop rules
def _state(params: SamplingParams, generated: int) -> SimpleNamespace:
    return SimpleNamespace(params=params, seq=SimpleNamespace(num_output_tokens=generated))


def test_greedy_rows_below_min_tokens_skip_the_in_kernel_argmax() -> None:
    held = SamplingParams(temperature=0.0, min_tokens=3)
    assert kernel_samples([_state(GREEDY, 0)])  # type: ignore[list-item]
    assert not kernel_samples([_state(GREEDY, 0), _state(held, 2)])  # type: ignore[list-item]
    assert kernel_samples([_state(GREEDY, 0), _state(held, 3)])  # type: ignore[list-item]


def test_the_device_rules_count_stop_ids_from_min_tokens() -> None:
    p = SamplingParams(max_tokens=20, min_tokens=5, stop_token_ids=(STOP,))
    rules = run_stops([p, p], EOS, [0, 3], [100, 100], [p.min_tokens, p.min_tokens])
    assert [r.min_count for r in rules.rows] == [5, 2]
    assert not rules.rows[0].stops_at(4, 7) and rules.rows[0].stops_at(5, 7)
    assert not rules.rows[1].stops_at(1, STOP) and rules.rows[1].stops_at(2, STOP)


class _CharTokenizer:
    """Token t decodes to chr(ord('a') + t)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(ord("a") + i) for i in ids)


def test_stop_strings_end_only_in_text_after_the_first_min_tokens_tokens() -> None:
    """vLLM's detokenizer: text of the first min_tokens tokens is not searched; a match may start in it."""
    out = OutputText(_CharTokenizer(), [0], SamplingParams(stop=["b", "cd"], min_tokens=3, max_tokens=9))
    assert [out.add(t) for t in (1, 1, 2)] == [None, None, None]  # "b" at tokens 1 and 2: no stop yet
    assert out.add(3) == "cd"  # "c" (token 3) + "d" (token 4): ends after min_tokens; the earlier "b"s never count
    assert out.text == "bb"
    plain = OutputText(_CharTokenizer(), [0], SamplingParams(stop=["b"], max_tokens=9))
    assert plain.add(1) == "b"
