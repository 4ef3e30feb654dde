"""SamplingParams validation: every accepted value is safe to sample, every rejection names its field."""
from __future__ import annotations

import pytest

from engine.errors import RequestError
from engine.sampling_params import GREEDY_TEMPERATURE, MIN_TEMPERATURE, SamplingParams


@pytest.mark.parametrize("field, value", [
    ("seed", 2**64), ("seed", -(2**63) - 1), ("seed", 1.5), ("seed", True),
    ("temperature", -1e-9), ("temperature", float("nan")), ("temperature", float("inf")),
    ("temperature", 10**400), ("temperature", "0.5"),
    ("top_p", 0.0), ("top_p", 1.0000001), ("top_p", float("nan")),
    ("top_k", -2), ("top_k", 2.0),
    ("min_p", -0.1), ("min_p", 1.5),
    ("presence_penalty", 2.01), ("frequency_penalty", -2.5),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", float("inf")),
    ("max_tokens", 0), ("logprobs", 21), ("logprobs", -1), ("n", 2),
    ("stop", [""]), ("stop", 5), ("stop_token_ids", [-1]), ("stop_token_ids", ["a"]),
    ("ignore_eos", 1), ("include_stop_str_in_output", "yes"),
])
def test_each_bad_value_is_a_request_error_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(RequestError) as info:
        SamplingParams(**{field: value})
    assert str(info.value).startswith(field)
    assert isinstance(info.value, ValueError)  # callers that catch ValueError keep working


def test_the_edges_of_every_range_are_accepted() -> None:
    for seed in (-(2**63), 2**64 - 1, 0):
        assert SamplingParams(seed=seed).seed == seed
    p = SamplingParams(temperature=1e-45, top_p=1e-46, min_p=1.0, presence_penalty=-2, frequency_penalty=2,
                       repetition_penalty=5e-324, top_k=-1, logprobs=20, stop="x", stop_token_ids=[0])
    assert p.stop == ("x",) and p.stop_token_ids == (0,) and p.presence_penalty == -2.0
    assert isinstance(p.presence_penalty, float)


def test_temperature_bands_follow_vllm() -> None:
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=GREEDY_TEMPERATURE / 2).is_greedy
    low = SamplingParams(temperature=GREEDY_TEMPERATURE)
    assert not low.is_greedy and low.effective_temperature == MIN_TEMPERATURE
    assert SamplingParams(temperature=0.7).effective_temperature == 0.7


def test_penalties_flag() -> None:
    assert not SamplingParams().has_penalties
    assert SamplingParams(repetition_penalty=1.1).has_penalties
    assert SamplingParams(presence_penalty=0.5).has_penalties
    assert SamplingParams(frequency_penalty=-0.5).has_penalties
