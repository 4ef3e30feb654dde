"""Randomized engine-loop simulation under page pressure.

A fake engine drives the scheduler with a fake KV cache: every chunk writes (sequence, life, position,
token) into the rows its block table names, then 'attention' reads back every cached position of the
sequence. A page handed to two live sequences, a stale block table or a chunk with the wrong tokens
shows up as a mismatch. Sampled tokens are a fixed function of (seq_id, position), so every finished
sequence's output is predictable no matter how often it was preempted.
"""
from __future__ import annotations

import random

import pytest
from sched_helpers import fake_token, rand_prompt

from engine.scheduler.requests.request_scheduler import Scheduler
from engine.scheduler.requests.scheduler_types import SchedulerConfig, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus


def _check_step(sched: Scheduler, out: SchedulerOutput, kv: dict) -> None:
    cfg, bm = sched.config, sched.block_manager
    assert not out.is_empty, "unfinished work but nothing scheduled (livelock)"
    assert out.num_tokens <= cfg.max_num_batched_tokens
    assert sched.num_running <= cfg.max_num_seqs and len(out.chunks) <= cfg.max_num_seqs
    lens = [c.num_tokens for c in out.chunks]
    assert lens == sorted(lens, key=lambda n: n != 1), "decode chunks must come first"
    assert len({c.seq_id for c in out.chunks}) == len(out.chunks)
    pages_in_step: list[int] = []
    for c in out.chunks:
        seq = c.seq
        assert seq.status is SequenceStatus.RUNNING and sched.get(seq.seq_id) is seq
        assert c.num_tokens >= 1 and c.start_pos == seq.num_computed_tokens
        assert c.token_ids == tuple(seq.all_token_ids[c.start_pos : c.context_len])
        assert c.context_len <= cfg.max_model_len
        assert c.samples == (c.context_len == seq.num_tokens)
        assert list(c.block_table) == bm.block_table(seq.seq_id)
        assert len(c.block_table) >= bm.pages_needed(c.context_len)
        pages_in_step += c.block_table
    assert len(pages_in_step) == len(set(pages_in_step)), "a page is in two chunks' tables"
    for seq in out.preempted:
        assert seq.status is SequenceStatus.WAITING and seq.num_computed_tokens == 0
        assert bm.num_pages_of(seq.seq_id) == 0
    live = [p for sid in bm.seq_ids() for p in bm.block_table(sid)]
    assert len(live) == len(set(live)), "a page is held by two live sequences"
    assert set(bm.seq_ids()) <= {s.seq_id for s in sched.running()}
    bm.check_invariants()
    # fake forward: write this step's K/V, then read back every cached position of each sequence
    for c in out.chunks:
        life = c.seq.num_preemptions
        for pos, tok in zip(c.positions, c.token_ids):
            kv[(c.block_table[pos // cfg.page_size], pos % cfg.page_size)] = (c.seq_id, life, pos, tok)
    for c in out.chunks:
        toks = c.seq.all_token_ids
        life = c.seq.num_preemptions
        for pos in range(c.context_len):
            row = (c.block_table[pos // cfg.page_size], pos % cfg.page_size)
            assert kv.get(row) == (c.seq_id, life, pos, toks[pos]), f"{c.seq_id}: K/V of position {pos} corrupted"


def _simulate(seed: int, chunked: bool) -> int:
    rng = random.Random(seed)
    page_size = rng.choice([1, 2, 4, 16])
    max_model_len = rng.randrange(16, 96)
    # a tiny cache: about two longest sequences' worth of pages, so preemption is frequent
    num_pages = -(-max_model_len // page_size) + rng.randrange(0, 2 * (-(-max_model_len // page_size)))
    max_seq_len = min(max_model_len, num_pages * page_size)
    budget = rng.randrange(max_seq_len, 2 * max_seq_len) if not chunked else rng.randrange(1, 48)
    cfg = SchedulerConfig(
        max_num_seqs=rng.randrange(1, 9),
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        num_pages=num_pages,
        page_size=page_size,
        chunked_prefill=chunked,
    )
    sched = Scheduler(cfg)
    pending_arrivals: list[tuple[Sequence, int]] = []
    for k in range(rng.randrange(10, 30)):
        seq = Sequence(f"r{k}", rand_prompt(rng, rng.randrange(1, max_seq_len + 1)))
        pending_arrivals.append((seq, rng.randrange(1, 40)))  # (sequence, max output tokens)
    targets = {seq.seq_id: t for seq, t in pending_arrivals}
    all_seqs = [seq for seq, _ in pending_arrivals]
    aborted: set[str] = set()
    kv: dict = {}
    steps = preemptions = 0
    while pending_arrivals or sched.has_unfinished():
        # requests arrive over time, FCFS
        while pending_arrivals and (not sched.has_unfinished() or rng.random() < 0.3):
            sched.add(pending_arrivals.pop(0)[0])
        out = sched.schedule()
        _check_step(sched, out, kv)
        preemptions += len(out.preempted)
        if rng.random() < 0.02 and sched.running():  # client disconnects mid-step
            victim = rng.choice(sched.running())
            assert sched.abort(victim.seq_id)
            aborted.add(victim.seq_id)
        sampled = {c.seq_id: fake_token(c.seq_id, c.context_len) for c in out.chunks if c.samples}
        sched.on_step_done(out, sampled)
        for c in out.chunks:  # the engine's stop checks
            seq = c.seq
            if c.samples and not seq.is_finished and (
                seq.num_output_tokens >= targets[seq.seq_id] or seq.num_tokens >= sched.max_seq_len
            ):
                sched.finish(seq.seq_id, SequenceStatus.FINISHED_LENGTH)
        steps += 1
        assert steps < 20_000, "no progress"
    assert sched.block_manager.num_used_pages == 0 and sched.num_waiting == sched.num_running == 0
    for seq in all_seqs:
        assert seq.is_finished
        if seq.seq_id in aborted:
            assert seq.status is SequenceStatus.FINISHED_ABORTED
            continue
        p = seq.num_prompt_tokens
        want = min(targets[seq.seq_id], max_seq_len - p) if p < max_seq_len else 1
        assert seq.num_output_tokens == max(want, 1)
        assert seq.output_token_ids == [fake_token(seq.seq_id, p + k) for k in range(seq.num_output_tokens)]
    return preemptions


@pytest.mark.parametrize("seed", range(40))
def test_engine_loop_chunked(seed: int) -> None:
    _simulate(1000 + seed, chunked=True)


@pytest.mark.parametrize("seed", range(15))
def test_engine_loop_no_chunking(seed: int) -> None:
    _simulate(2000 + seed, chunked=False)


def test_simulation_actually_preempts() -> None:
    # guard against the simulation silently never exercising preemption
    assert sum(_simulate(1000 + s, chunked=True) for s in range(12)) > 0
