"""Sequence / SequenceStatus basics and validation."""
from __future__ import annotations

import random

import pytest

from engine.sequence import Sequence, SequenceStatus


def test_token_properties_and_slices() -> None:
    rng = random.Random(1234)
    prompt = [rng.randrange(1, 50_000) for _ in range(rng.randrange(3, 40))]
    seq = Sequence("a", prompt)
    outputs = [rng.randrange(1, 50_000) for _ in range(rng.randrange(1, 20))]
    for t in outputs:
        seq.append_token(t)
    assert seq.all_token_ids == prompt + outputs
    assert seq.num_tokens == len(prompt) + len(outputs)
    assert (seq.num_prompt_tokens, seq.num_output_tokens) == (len(prompt), len(outputs))
    assert seq.last_token_id == outputs[-1]
    assert seq.num_pending_tokens == seq.num_tokens  # nothing computed yet
    full = prompt + outputs
    for _ in range(200):
        a = rng.randrange(0, len(full) + 1)
        b = rng.randrange(a, len(full) + 1)
        assert seq.token_slice(a, b) == tuple(full[a:b])
    with pytest.raises(ValueError):
        seq.token_slice(0, len(full) + 1)


def test_prompt_is_copied_and_last_token_of_prompt() -> None:
    prompt = [5, 9, 11]
    seq = Sequence("b", prompt)
    prompt.append(99)
    assert seq.prompt_token_ids == [5, 9, 11]
    assert seq.last_token_id == 11


def test_status_flags() -> None:
    finished = {s for s in SequenceStatus if s.is_finished}
    assert finished == {
        SequenceStatus.FINISHED_STOPPED,
        SequenceStatus.FINISHED_LENGTH,
        SequenceStatus.FINISHED_ABORTED,
    }
    assert SequenceStatus.FINISHED_LENGTH.finish_reason == "length"
    assert SequenceStatus.RUNNING.finish_reason is None
    seq = Sequence("c", [1, 2])
    assert seq.status is SequenceStatus.WAITING and not seq.is_finished


def test_identity_semantics() -> None:
    a, b = Sequence("x", [1, 2, 3]), Sequence("x", [1, 2, 3])
    assert a != b and len({a, b}) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seq_id": "", "prompt_token_ids": [1]},
        {"seq_id": 3, "prompt_token_ids": [1]},
        {"seq_id": "s", "prompt_token_ids": [1, -2]},
        {"seq_id": "s", "prompt_token_ids": [1, 2.0]},
        {"seq_id": "s", "prompt_token_ids": [True]},
        {"seq_id": "s", "prompt_token_ids": [1], "num_computed_tokens": 2},
    ],
)
def test_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Sequence(**kwargs)


def test_append_rejects_bad_token() -> None:
    seq = Sequence("d", [3])
    with pytest.raises(ValueError, match="'d'"):
        seq.append_token(-1)
