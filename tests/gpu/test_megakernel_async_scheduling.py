"""One step of look-ahead on the cuda backend (engine/lookahead.py through CudaBackend.launch_step): every request's
streamed tokens, texts and finish reasons equal the engine's without it, with arrivals, stops, aborts and
preemption while a step is in flight; a step launched ahead takes its tokens from the step before on the GPU."""
from __future__ import annotations

import pytest

from engine import SamplingParams
from tests.engine.test_async_scheduling import PROMPTS, Record, _count_feeds, _drive, _engine, _greedy

pytestmark = pytest.mark.gpu

CUDA = dict(dtype="bfloat16")


def _same_on_gpu(checkpoint: str, arrivals: dict, abort_after: dict[str, int] | None = None,
                 **kw: object) -> dict[str, list[Record]]:
    want = _drive(_engine(checkpoint, "cuda", False, **CUDA, **kw), arrivals, abort_after)
    ahead = _engine(checkpoint, "cuda", True, **CUDA, **kw)
    fed = _count_feeds(ahead)
    got = _drive(ahead, arrivals, abort_after)
    assert fed[0] > 0
    assert got.keys() == want.keys()
    for rid in want:  # same steps on the same kernel: ids, text and reasons equal; logprobs to bf16 rounding
        assert [g[:5] for g in got[rid]] == [w[:5] for w in want[rid]], rid
    return got


def test_greedy_arrivals_and_stops(tiny_checkpoint: str) -> None:
    arrivals = {0: [("a", PROMPTS[0], _greedy(9)), ("b", PROMPTS[1], _greedy(3))],
                2: [("c", PROMPTS[2], _greedy(12))],
                5: [("d", PROMPTS[3], _greedy(1)),
                    ("e", PROMPTS[4], SamplingParams(temperature=0.0, max_tokens=30))]}
    _same_on_gpu(tiny_checkpoint, arrivals)


def test_seeded_sampling_and_aborts(tiny_checkpoint: str) -> None:
    sampled = [SamplingParams(temperature=0.9, top_p=0.9, seed=7 + i, max_tokens=10, ignore_eos=True)
               for i in range(3)]
    arrivals = {0: [("s0", PROMPTS[0], sampled[0]), ("g", PROMPTS[1], _greedy(20))],
                1: [("s1", PROMPTS[2], sampled[1])],
                4: [("s2", PROMPTS[3], sampled[2])]}
    _same_on_gpu(tiny_checkpoint, arrivals, {"g": 4})


def test_preemption_under_a_tiny_kv_pool(tiny_checkpoint: str) -> None:
    arrivals = {0: [(f"p{i}", PROMPTS[i], _greedy(26)) for i in range(3)],
                3: [("q", PROMPTS[4], _greedy(20))]}
    _same_on_gpu(tiny_checkpoint, arrivals, num_pages=6, page_size=8)
