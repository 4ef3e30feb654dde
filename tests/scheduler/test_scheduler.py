"""Scheduler policy: admission, token budget, chunked prefill, decodes, preemption, abort, validation."""
from __future__ import annotations

import random

import pytest
from sched_helpers import add, fake_token, make_scheduler, rand_prompt, run_step

from engine.scheduler.requests.scheduler_types import SchedulerConfig
from engine.sequence import SequenceStatus


def test_fcfs_admission_and_max_num_seqs() -> None:
    rng = random.Random(1)
    sched = make_scheduler(max_num_seqs=2, max_num_batched_tokens=512)
    seqs = [add(sched, f"s{k}", rand_prompt(rng, rng.randrange(3, 9))) for k in range(4)]
    out = run_step(sched)
    assert [c.seq_id for c in out.chunks] == ["s0", "s1"]
    assert sched.num_running == 2 and sched.num_waiting == 2
    for _ in range(3):
        out = run_step(sched)
        assert {c.seq_id for c in out.chunks} == {"s0", "s1"}
        assert all(c.is_decode and c.samples for c in out.chunks)
    sched.finish("s0", SequenceStatus.FINISHED_STOPPED)
    assert seqs[0].status is SequenceStatus.FINISHED_STOPPED and sched.get("s0") is None
    out = run_step(sched)
    assert [c.seq_id for c in out.chunks] == ["s1", "s2"]  # s2 before s3: FCFS
    assert out.chunks[1].start_pos == 0 and out.chunks[1].token_ids == tuple(seqs[2].prompt_token_ids)


def test_token_budget_and_chunk_contents() -> None:
    rng = random.Random(2)
    sched = make_scheduler(max_num_batched_tokens=10)
    a = add(sched, "a", rand_prompt(rng, 6))
    b = add(sched, "b", rand_prompt(rng, 6))
    out = run_step(sched)
    assert out.num_tokens == 10
    ca, cb = out.chunks
    assert (ca.seq is a, ca.num_tokens, ca.samples) == (True, 6, True)
    assert (cb.seq is b, cb.num_tokens, cb.samples) == (True, 4, False)
    assert cb.token_ids == tuple(b.prompt_token_ids[:4])
    assert b.num_output_tokens == 0 and a.num_output_tokens == 1
    assert a.output_token_ids == [fake_token("a", 6)]
    out = run_step(sched)
    # decode chunks come first, then the rest of b's prompt
    assert [(c.seq_id, c.start_pos, c.num_tokens, c.samples) for c in out.chunks] == [
        ("a", 6, 1, True),
        ("b", 4, 2, True),
    ]
    assert out.chunks[0].token_ids == (a.output_token_ids[0],)


def test_chunked_prefill_progresses_and_samples_only_at_the_end() -> None:
    rng = random.Random(3)
    sched = make_scheduler(max_num_batched_tokens=8, page_size=4)
    prompt = rand_prompt(rng, 27)
    seq = add(sched, "long", prompt)
    starts, flags = [], []
    while seq.num_output_tokens == 0:
        out = run_step(sched)
        (chunk,) = out.chunks
        assert chunk.token_ids == tuple(prompt[chunk.start_pos : chunk.context_len])
        # the block table always covers the positions being written
        assert len(chunk.block_table) * 4 >= chunk.context_len
        starts.append(chunk.start_pos)
        flags.append(chunk.samples)
    assert starts == [0, 8, 16, 24] and flags == [False, False, False, True]
    out = run_step(sched)
    assert out.chunks[0].is_decode and out.chunks[0].start_pos == 27


def test_without_chunked_prefill_whole_prompt_must_fit() -> None:
    rng = random.Random(4)
    sched = make_scheduler(max_num_batched_tokens=256, num_pages=128, chunked_prefill=False)
    add(sched, "a", rand_prompt(rng, 200))
    add(sched, "b", rand_prompt(rng, 100))
    out = run_step(sched)
    assert [c.seq_id for c in out.chunks] == ["a"]  # b's 100 tokens do not fit the 56 left
    out = run_step(sched)
    assert [(c.seq_id, c.num_tokens) for c in out.chunks] == [("a", 1), ("b", 100)]
    with pytest.raises(ValueError, match="chunked_prefill=False"):
        SchedulerConfig(4, 100, 256, 64, 4, chunked_prefill=False)


def test_prefill_chunk_leaves_budget_for_decodes() -> None:
    rng = random.Random(5)
    sched = make_scheduler(max_num_batched_tokens=8)
    add(sched, "d", rand_prompt(rng, 3))
    add(sched, "p", rand_prompt(rng, 30))
    run_step(sched)  # d: 3 tokens, p: first 5
    # Put the partial prefill ahead of the decode (the order a priority policy could produce): the
    # prefill must still leave one token of the budget for the decode behind it.
    sched._running.reverse()
    out = run_step(sched)
    assert [(c.seq_id, c.num_tokens) for c in out.chunks] == [("d", 1), ("p", 7)]


def test_preempts_most_recent_and_requeues_at_front() -> None:
    rng = random.Random(6)
    # 4 pages of 2 tokens; a: 4 tokens (2 pages), b: 3 tokens (2 pages): the cache is full.
    sched = make_scheduler(num_pages=4, page_size=2, max_model_len=8)
    a = add(sched, "a", rand_prompt(rng, 4))
    b = add(sched, "b", rand_prompt(rng, 3))
    c = add(sched, "c", rand_prompt(rng, 2))
    out = run_step(sched)
    assert [ch.seq_id for ch in out.chunks] == ["a", "b"] and sched.block_manager.num_free_pages == 0
    out = run_step(sched)  # a writes position 4: needs a 3rd page -> b (newest) is preempted
    assert out.preempted == (b,)
    assert [ch.seq_id for ch in out.chunks] == ["a"]
    assert (b.status, b.num_computed_tokens, b.num_preemptions) == (SequenceStatus.WAITING, 0, 1)
    assert b.num_output_tokens == 1  # its sampled token is kept; it is recomputed, not lost
    assert sched.block_manager.num_pages_of("b") == 0
    assert [s.seq_id for s in sched.waiting()] == ["b", "c"]  # front of the queue
    assert a.status is SequenceStatus.RUNNING
    sched.finish("a", SequenceStatus.FINISHED_STOPPED)
    out = run_step(sched)
    # b comes back first and recomputes prompt + its output token, then samples the next one
    assert out.chunks[0].seq is b and out.chunks[0].token_ids == tuple(b.all_token_ids[:4])
    assert out.chunks[0].samples


def test_preempts_itself_when_nothing_after_it() -> None:
    rng = random.Random(7)
    sched = make_scheduler(num_pages=5, page_size=2, max_model_len=10)
    a = add(sched, "a", rand_prompt(rng, 4))
    b = add(sched, "b", rand_prompt(rng, 4))
    run_step(sched)
    out = run_step(sched)  # a takes the last free page; b (scheduled after a) has no victim but itself
    assert [ch.seq_id for ch in out.chunks] == ["a"] and out.preempted == (b,)
    assert b.status is SequenceStatus.WAITING and a.num_computed_tokens == 5
    assert sched.block_manager.num_used_pages == 3
    sched.block_manager.check_invariants()


def test_abort_frees_pages() -> None:
    rng = random.Random(8)
    sched = make_scheduler()
    add(sched, "a", rand_prompt(rng, 20))
    b = add(sched, "b", rand_prompt(rng, 9))
    add(sched, "w", rand_prompt(rng, 5))
    out = sched.schedule()  # a, b and w all admitted (budget 64)
    assert sched.block_manager.num_used_pages > 0
    assert sched.abort("b")  # aborted while its step runs: on_step_done must skip it
    sched.on_step_done(out, {c.seq_id: 5 for c in out.chunks})
    assert b.status is SequenceStatus.FINISHED_ABORTED and b.num_output_tokens == 0
    assert not sched.abort("b")
    assert sched.abort("a") and sched.abort("w")
    assert not sched.has_unfinished() and sched.block_manager.num_used_pages == 0
    assert run_step(sched).is_empty


def test_abort_waiting_sequence() -> None:
    sched = make_scheduler(max_num_seqs=1)
    add(sched, "a", [1, 2, 3])
    add(sched, "b", [4, 5])
    run_step(sched)
    assert sched.abort("b") and sched.num_waiting == 0 and sched.num_running == 1


@pytest.mark.parametrize(
    ("prompt_len", "overrides", "match"),
    [
        (0, {}, "empty prompt"),
        (257, {}, "max_model_len"),
        (40, {"num_pages": 4, "page_size": 8}, "KV cache holds 32"),
    ],
)
def test_impossible_prompt_rejected(prompt_len: int, overrides: dict, match: str) -> None:
    sched = make_scheduler(**overrides)
    with pytest.raises(ValueError, match=match):
        add(sched, "x", list(range(1, prompt_len + 1)))
    assert not sched.has_unfinished()


def test_add_rejects_duplicates_and_used_sequences() -> None:
    sched = make_scheduler()
    add(sched, "x", [1, 2])
    with pytest.raises(ValueError, match="already"):
        add(sched, "x", [3])
    run_step(sched)
    seq = sched.get("x")
    sched.finish("x", SequenceStatus.FINISHED_STOPPED)
    with pytest.raises(ValueError, match="fresh"):
        sched.add(seq)
    with pytest.raises(ValueError, match="unknown"):
        sched.finish("x", SequenceStatus.FINISHED_STOPPED)
    add(sched, "y", [1])
    with pytest.raises(ValueError, match="FINISHED_"):
        sched.finish("y", SequenceStatus.RUNNING)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_num_seqs=0, max_num_batched_tokens=8, max_model_len=8, num_pages=4, page_size=2),
        dict(max_num_seqs=2, max_num_batched_tokens=-1, max_model_len=8, num_pages=4, page_size=2),
        dict(max_num_seqs=2, max_num_batched_tokens=8, max_model_len=8, num_pages=4, page_size=2.0),
        dict(max_num_seqs=2, max_num_batched_tokens=8, max_model_len=8, num_pages=4, page_size=2,
             chunked_prefill=1),
    ],
)
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="SchedulerConfig"):
        SchedulerConfig(**kwargs)


def test_on_step_done_errors() -> None:
    sched = make_scheduler()
    add(sched, "a", [1, 2, 3])
    out = sched.schedule()
    with pytest.raises(ValueError, match="no sampled token"):
        sched.on_step_done(out, {})
    sched2 = make_scheduler()
    add(sched2, "a", [1, 2, 3])
    out = sched2.schedule()
    sched2.on_step_done(out, {"a": 9})
    with pytest.raises(ValueError, match="applied twice"):
        sched2.on_step_done(out, {"a": 9})


def test_never_schedules_past_max_model_len() -> None:
    rng = random.Random(9)
    sched = make_scheduler(max_model_len=12)
    seq = add(sched, "a", rand_prompt(rng, 9))
    # An engine that forgets to finish at max_model_len: the scheduler computes positions < 12 only,
    # then finishes the sequence itself (FINISHED_LENGTH) instead of holding its pages forever.
    finished = []
    for _ in range(10):
        out = run_step(sched)
        assert all(c.context_len <= 12 for c in out.chunks)
        finished += out.finished
    assert finished == [seq] and seq.status is SequenceStatus.FINISHED_LENGTH
    assert seq.num_tokens == 13 and sched.block_manager.num_used_pages == 0


def test_max_seq_len_is_capped_by_cache() -> None:
    sched = make_scheduler(max_model_len=1000, num_pages=3, page_size=4)
    assert sched.max_seq_len == 12 and sched.config.capacity_tokens == 12


def test_more_decodes_than_the_budget_take_turns() -> None:
    """20 decoding sequences and 8 tokens per step: every step serves the 8 that waited longest, so each one
    advances in turn (none is left behind while the oldest ones run to their end). Meanwhile requests kept
    arriving: each step gives half its tokens to prompts until every one of them runs."""
    sched = make_scheduler(max_num_seqs=20, max_num_batched_tokens=8, num_pages=256)
    rng = random.Random(3)
    for i in range(20):
        add(sched, f"s{i}", rand_prompt(rng, 1))  # one-token prompts: each one's first step is already a decode
    for _ in range(6):  # admissions: 8, then 4 per step beside 4 decodes in turn
        run_step(sched)
    assert sched.num_running == 20 and sched.num_waiting == 0
    served: dict[str, int] = {f"s{i}": 0 for i in range(20)}
    for _ in range(10):  # 80 tokens: 4 each on average
        out = run_step(sched)
        assert len(out.chunks) == 8
        for c in out.chunks:
            served[c.seq_id] += 1
    assert max(served.values()) - min(served.values()) <= 1 and sum(served.values()) == 80, served


def test_a_prompt_gets_half_the_budget_beside_more_decodes_than_fit() -> None:
    """8 sequences decode and fill the 8-token budget; a longer prompt admitted now still progresses (half of each
    step, the decodes taking turns in the other half) instead of waiting for a decoding sequence to finish."""
    sched = make_scheduler(max_num_seqs=12, max_num_batched_tokens=8, num_pages=256)
    rng = random.Random(4)
    for i in range(8):
        add(sched, f"d{i}", rand_prompt(rng, 1))
    run_step(sched)
    add(sched, "long", rand_prompt(rng, 12))
    for _ in range(3):  # the 12-token prompt in three steps of 4
        out = run_step(sched)
        chunk = next((c for c in out.chunks if c.seq_id == "long"), None)
        assert chunk is not None and chunk.num_tokens == 4 and sum(c.num_tokens for c in out.chunks) == 8
    assert sched.get("long").num_computed_tokens == 12
