"""Padded steps (engine/cuda/step_padding.py): bucketed counts, the real sequences' logits unchanged by the dummy
sequences (on the VM, which runs the same instruction streams as the GPU), and padded runs' dummy rows."""
from __future__ import annotations

import random

import torch

from engine.backends.vm_backend import VMBackend
from engine.cuda.step_padding import (bucket_up, can_pad, dummy_step, largest_counts, pad_batch, padded_budget,
                                      padded_counts)
from engine.profiling import decode_batch
from engine.run_stops import RS_HEADER_WORDS, RS_NUM_ROWS, RS_ROW_STOPPED, RS_ROW_WORDS, RS_RUNNING, RowStop, RunStops
from tests.vm.helpers import Scenario, random_weights, small_config


def test_buckets_are_powers_of_two_and_their_halves_between() -> None:
    assert [bucket_up(n) for n in (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 100, 2000)] == \
        [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 128, 2048]


def test_padded_counts_leave_room_for_one_token_per_dummy_sequence() -> None:
    rng = random.Random(0)
    for _ in range(5000):
        S = rng.randint(1, 64)
        T = S + rng.randint(0, 3000)
        Tp, Sp = padded_counts(T, S)
        assert bucket_up(Tp) == Tp and Tp >= T and Sp >= S and Tp - T >= Sp - S
        assert (Tp == T) == (Sp == S)  # tokens are only added with a dummy sequence to carry them
        assert Tp < 2 * T + 2


def test_dummy_sequences_leave_the_real_logits_unchanged() -> None:
    cfg = small_config()
    num_pages, page_size = 64, 8
    # One page more than the scenario hands out: the spare one (the cuda backend's is past the engine's too).
    vm = VMBackend(random_weights(cfg, seed=3), num_pages + 1, page_size, num_sms=8, check_races=True)
    scen = Scenario(cfg, [19, 7, 5, 3, 1], page_size, num_pages, seed=4)
    spare = num_pages
    for plan in ([12, 7, 5, 3, 1], [7, 1, 1, 1, 1], [1, 1, 1, 1, 1]):
        batch, seqs = scen.batch(plan)
        padded = pad_batch(batch, spare)
        assert (padded.num_tokens, padded.num_seqs) == padded_counts(batch.num_tokens, batch.num_seqs)
        want = vm.forward(batch)
        got = vm.forward(padded)[:batch.num_seqs]
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        scen.feed(seqs, want.argmax(-1).tolist())


def test_a_padded_run_gives_its_dummy_rows_whole_tables_of_the_spare_page() -> None:
    batch = decode_batch(13, 40, 8)
    padded = pad_batch(batch, 99, whole_table=True)
    assert (padded.num_tokens, padded.num_seqs) == (16, 16)
    assert bool((padded.block_tables[13:] == 99).all()) and torch.equal(padded.block_tables[:13], batch.block_tables)
    assert padded.positions[13:].tolist() == [0, 0, 0] and padded.context_lens[13:].tolist() == [1, 1, 1]


def test_dummy_rows_of_a_run_start_stopped() -> None:
    stops = RunStops((RowStop((2,), 5, 0), RowStop((2, 3), 9, 0)))
    words = stops.words(4)
    k = stops.ids_per_row
    assert words[RS_RUNNING] == 2 and words[RS_NUM_ROWS] == 4
    rows = [words[RS_HEADER_WORDS + r * (RS_ROW_WORDS + k):][:RS_ROW_WORDS] for r in range(4)]
    assert [r[RS_ROW_STOPPED] for r in rows] == [0, 0, 1, 1]
    assert words[RS_HEADER_WORDS:len(stops.words())] == stops.words()[RS_HEADER_WORDS:]  # the real rows' records


def test_padding_never_exceeds_the_kernels_step() -> None:
    batch = decode_batch(13, 40, 8)
    assert pad_batch(batch, 99, max_tokens=15) is batch and pad_batch(batch, 99, max_tokens=16).num_seqs == 16


def test_the_largest_counts_take_every_step_the_engine_schedules() -> None:
    for max_tokens, max_seqs in ((2048, 64), (512, 256), (100, 3), (8192, 1)):
        T, S = largest_counts(max_tokens, max_seqs)
        for tokens in range(max_seqs, max_tokens + 1, max(1, max_tokens // 37)):
            for seqs in {1, max_seqs // 2 or 1, max_seqs}:
                if seqs <= tokens:
                    assert can_pad(tokens, seqs, T, S), (tokens, seqs, T, S)
    assert largest_counts(2048, 64) == (3072, 96) and largest_counts(2048, 64, 2500) == (2500, 96)


def test_a_dummy_step_touches_only_the_spare_page() -> None:
    step = dummy_step(10, 3, 5, 77)
    assert (step.num_tokens, step.num_seqs) == (10, 3) and step.query_start.tolist() == [0, 1, 2, 10]
    assert step.block_tables[:, 0].tolist() == [77] * 3 and bool((step.block_tables[:, 1:] == -1).all())
    assert step.positions.tolist() == [0] * 10 and step.context_lens.tolist() == [1, 1, 1]


def test_the_padded_budget_keeps_every_step_in_its_bucket() -> None:
    """A full step whose sequence count is off the buckets pads within the budget's token bucket (a 2 048-token step
    of 18 sequences would pad to 3 072 tokens without the headroom)."""
    assert padded_counts(2048, 18)[0] == 3072
    for max_tokens, max_seqs in ((2048, 64), (2048, 128), (512, 64), (3000, 64), (8192, 256), (2048, 1)):
        budget = padded_budget(max_tokens, max_seqs)
        assert 0.9 * max_tokens <= budget <= max_tokens
        top = bucket_up(max_tokens)
        for tokens in range(max(1, budget - 200), budget + 1):
            assert all(padded_counts(tokens, s)[0] <= top for s in range(1, min(max_seqs, tokens) + 1))
    assert padded_budget(2048, 64) == 2016 and padded_budget(2048, 1) == 2048
