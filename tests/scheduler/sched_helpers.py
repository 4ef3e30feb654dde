"""Shared helpers for the scheduler tests."""
from __future__ import annotations

import random
import zlib

from engine.scheduler.requests.request_scheduler import Scheduler
from engine.scheduler.requests.scheduler_types import SchedulerConfig, SchedulerOutput
from engine.sequence import Sequence


def make_scheduler(**overrides: object) -> Scheduler:
    kwargs: dict = dict(
        max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, num_pages=64, page_size=4
    )
    kwargs.update(overrides)
    return Scheduler(SchedulerConfig(**kwargs))


def rand_prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1, 32_000) for _ in range(n)]


def fake_token(seq_id: str, pos: int) -> int:
    """Deterministic 'model': the token sampled at position `pos` of `seq_id` (independent of batching
    and preemption, so the final outputs can be predicted)."""
    return zlib.crc32(f"{seq_id}:{pos}".encode()) % 32_000 + 1


def run_step(sched: Scheduler) -> SchedulerOutput:
    """One engine step with the fake model."""
    out = sched.schedule()
    sampled = {c.seq_id: fake_token(c.seq_id, c.context_len) for c in out.chunks if c.samples}
    sched.on_step_done(out, sampled)
    return out


def add(sched: Scheduler, seq_id: str, prompt: list[int]) -> Sequence:
    seq = Sequence(seq_id, prompt)
    sched.add(seq)
    return seq
