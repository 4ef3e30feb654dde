"""Steps of new shapes hosted in a compiled larger stream (engine/cuda/stream_hosting.py) on the GPU: the same logits
as the same steps in their own shapes' streams (a second backend with hosting off), for prompt chunks and decodes
beside each other; and the warm-up's hosts take a later step."""
from __future__ import annotations

import pytest
import torch

from engine.backends.cuda_backend import CudaBackend
from engine.cuda.step_padding import dummy_step, host_ladder
from tests.gpu.mk_helpers import clear_winners, rel_err, small
from tests.gpu.test_megakernel_mma_matvec import scaled_weights
from tests.vm.helpers import Scenario

pytestmark = pytest.mark.gpu


def test_hosted_steps_match_their_own_streams() -> None:
    cfg = small(512, 8, 2, 64, 1024, 2, 384)
    weights = scaled_weights(cfg, seed=43)
    hosted = CudaBackend(weights, num_pages=128, page_size=16)
    exact = CudaBackend(weights, num_pages=128, page_size=16, host_steps=False)
    plans: list[list[int | None]] = [
        [12] * 8,  # 96 tokens over 8 sequences (a bucketed shape, unpadded): compiled on both
        [10, 10, 10, 0, 0, 0, 0, 0],  # 30 over 3: hosted in the first step's stream (padded to 96 over 8)
        [5, 5, 5, 5, 5, 0, 0, 0],  # 25 over 5: hosted
        [1] * 8,  # decodes of 8 (unpadded, compiled)
        [None, 1, 1, 1, 1, 1, 1, 0],  # the rest of a prompt beside six decodes: hosted (its dummy takes 58 tokens)
    ]
    scens = [Scenario(cfg, [60] * 8, page_size=16, num_pages=128, seed=19) for _ in range(2)]
    for step, plan in enumerate(plans):
        (a, seqs), (b, _) = scens[0].batch(plan), scens[1].batch(plan)
        got, want = hosted.forward(a), exact.forward(b)
        assert rel_err(got, want) < 2e-2, f"step {step}: hosted logits differ ({rel_err(got, want):.3g})"
        keep = clear_winners(want)
        assert torch.equal(got.argmax(-1)[keep], want.argmax(-1)[keep]), f"step {step}: greedy ids differ"
        ids = want.argmax(-1).tolist()
        for sc in scens:
            sc.feed(seqs, ids)
    assert hosted.stream_stats().hosted == 3 and exact.stream_stats().hosted == 0
    assert hosted.stream_stats().misses == 2 and exact.stream_stats().misses == 5


def test_the_warm_ups_hosts_take_a_later_step() -> None:
    cfg = small(512, 8, 2, 64, 1024, 2, 384)
    backend = CudaBackend(scaled_weights(cfg, seed=44), num_pages=64, page_size=16)
    with backend.warming_up(max_tokens=256, max_seqs=16, max_table_pages=8):
        pass
    ladder = host_ladder(256, 16, backend.max_tokens_per_step)
    assert backend.stream_stats().misses == len(ladder)
    backend.greedy(dummy_step(100, 7, 8, 64))  # padded to 128 over 8: hosted by 128 over 24
    stats = backend.stream_stats()
    assert stats.hosted == 1 and stats.misses == len(ladder) and backend.last.compiled.shape.num_tokens == 128
