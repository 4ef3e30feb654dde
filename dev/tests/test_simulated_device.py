"""dev/simulated_device.py: the modelled step times follow the measured points, and a run of decode steps hands its
ids over in chunks, the chunks already queued still handed over after the host asked to stop."""
from __future__ import annotations

import pytest
import torch

from dev.simulated_device import FAVOURED_TOKEN, STEP_MS_H200_1B, simulate_device, step_ms
from engine.backends.base import Backend
from models.llama.step_batch import StepBatch


def test_step_times_follow_the_points_and_the_padding() -> None:
    for tokens, ms in STEP_MS_H200_1B[:-1]:
        assert step_ms(tokens, tokens) == pytest.approx(ms)
    assert step_ms(2048, 1) == pytest.approx(STEP_MS_H200_1B[-1][1])
    assert step_ms(2048, 18) > step_ms(2000, 18)  # pads to 3 072 tokens: past the last point, extrapolated
    assert step_ms(1025, 10) == step_ms(1536, 12)  # one padded shape, one time


class _Tiny(Backend):
    name = "tiny"

    def forward(self, batch: StepBatch) -> torch.Tensor:
        raise AssertionError("replaced")


def test_a_run_hands_over_chunks_and_the_queued_ones_after_a_stop() -> None:
    backend = _Tiny()
    simulate_device(backend, vocab=11)
    batch = StepBatch.build([[1], [2]], [3, 4], [[0], [1]], device=torch.device("cpu"), page_size=16)
    seen: list[int] = []

    def on_records(records: dict[str, torch.Tensor]) -> bool:
        assert bool((records["ids"] == FAVOURED_TOKEN).all()) and records["ids"].shape[1] == 2
        seen.append(records["ids"].shape[0])
        return len(seen) < 2  # stop after the second chunk

    ran = backend.decode_steps(batch, 30, 16, on_records)
    assert seen == [4, 4, 4, 4] and ran == 16  # two more chunks were queued behind the second
    logits = backend.forward(batch)
    assert logits.shape == (2, 11) and int(logits[0].argmax()) == FAVOURED_TOKEN
