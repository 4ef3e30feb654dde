"""Dependencies read from the instruction words: which producers each wait needed, and the one that released it."""
from __future__ import annotations

import numpy as np
from synthetic_profiles import make_chain_record, make_record

from profiler.deps import dependencies, step_index
from profiler.record import W_ID, W_NUM_WAITS, W_SIGNAL, W_SIGNAL_AMOUNT, W_WAITS, ProfileRecord


def test_chain_waits_for_every_producer_of_its_counter(rng):
    rec = make_chain_record(rng, layers=3, width_a=4, width_b=2, steps=2)
    deps = dependencies(rec)
    ops = rec.words[:, 0]
    per_step = rec.num_instructions // 2
    assert deps.producers(0) == []  # layer 0's A's wait for nothing
    assert deps.producers(4) == [0, 1, 2, 3] and deps.producers(5) == [0, 1, 2, 3]  # B waits all A's of its layer
    assert deps.producers(6) == [4, 5]  # layer 1's A waits both B's of layer 0
    # Step 2 reuses the counters; its waits see only its own step's producers.
    assert deps.producers(per_step + 4) == [per_step + k for k in range(4)]
    producer, consumer = deps.critical_edges()
    for p, c in zip(producer.tolist(), consumer.tolist()):
        same = [q for q in deps.producers(c)]
        assert p in same and rec.end_ns[p] == rec.end_ns[same].max()  # the last one to finish released it
    assert set(consumer.tolist()) == set(np.flatnonzero(rec.words[:, W_NUM_WAITS] > 0).tolist())
    assert (ops[producer] != ops[consumer]).all()


def _words(rows: list[tuple[int, list[tuple[int, int]], int]]) -> np.ndarray:
    w = np.zeros((len(rows), 32), np.int32)
    for i, (iid, waits, signal) in enumerate(rows):
        w[i, 0], w[i, W_ID], w[i, W_NUM_WAITS] = 1, iid, len(waits)
        w[i, W_WAITS : W_WAITS + 10 : 2] = -1
        for k, (c, t) in enumerate(waits):
            w[i, W_WAITS + 2 * k], w[i, W_WAITS + 2 * k + 1] = c, t
        w[i, W_SIGNAL], w[i, W_SIGNAL_AMOUNT] = signal, 0 if signal < 0 else 1
    return w


def test_partial_target_takes_the_first_finishers_and_two_waits():
    # Producers 0..2 signal counter 0 and end at 30, 10, 20; 3 signals counter 1. Instruction 4 waits for
    # 2 units of counter 0 (the two that finished first: 1 and 2) and 1 unit of counter 1.
    rows = [(0, [], 0), (1, [], 0), (2, [], 0), (3, [], 1), (4, [(0, 2), (1, 1)], -1)]
    end = np.array([30, 10, 20, 5, 60])
    rec = ProfileRecord(words=_words(rows), sm=np.arange(5), start_ns=np.zeros(5, np.int64), end_ns=end,
                        wait_ns=np.array([0, 0, 0, 0, 25]), opcode_names={1: "A"}, simulated=False)
    deps = dependencies(rec)
    assert deps.producers(4) == [1, 2, 3]
    producer, consumer = deps.critical_edges()
    assert sorted(zip(producer.tolist(), consumer.tolist())) == [(2, 4), (3, 4)]


def test_records_without_dependency_words_have_none(rng):
    rec = make_record(rng, n=40)  # 8 words per instruction: no waits recorded
    deps = dependencies(rec)
    assert deps.num_waits == 0 and deps.producers(3) == []
    assert deps.critical_edges()[0].size == 0


def test_step_index_restarts_with_the_ids(rng):
    rec = make_chain_record(rng, layers=2, steps=3)
    steps = step_index(rec)
    assert steps.tolist() == sorted(steps.tolist()) and np.bincount(steps).tolist() == [12, 12, 12]
