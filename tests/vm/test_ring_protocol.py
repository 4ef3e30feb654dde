"""A model of the interpreter's weight-page ring (csrc/interpreter/roles.cuh, consumer_matvec.cuh,
state.cuh) under random warp schedules, to pin down the protocol the CUDA code implements.

The loader arms ring positions in order (position n may be armed once position n - PAGES was consumed);
a bulk copy lands some time later and completes the page's `full` mbarrier phase. Consumer warps take
an instruction's pages round-robin and drift apart; all warps meet at the end of each instruction. An
mbarrier parity wait only tells the phase of one parity from the one before it: `try_wait.parity(P)`
passes iff the barrier's current phase parity differs from P. The model checks that no consumer ever
passes its wait while the slot holds another position's page.

This is the bug behind the first GPU session's stalls: without the "wait until the loader armed n"
check (`wait_page_issued`), a fast warp could pass a wait two phases early.
"""
from __future__ import annotations

import random

import pytest

PAGES = 9  # config.cuh MIN_RING_PAGES (the smallest ring a stream runs with)
WARPS = 8  # config.cuh NUM_CONSUMER_WARPS


def run_ring(pages_per_instr: list[int], seed: int, check_issued: bool) -> str | None:
    """Simulate one launch; returns a description of the first violation, or None."""
    rng = random.Random(seed)
    total = sum(pages_per_instr)
    full_done = [0] * PAGES  # completed phases of each page's full barrier
    empty_done = [0] * PAGES  # completed phases of each page's empty barrier
    holds = [-1] * PAGES  # position whose bytes sit in each slot (after its copy landed)
    armed = 0  # positions the loader armed (the kernel's ring_issued)
    in_flight: list[int] = []  # armed positions whose copy has not landed
    first = 0  # first position of the consumers' current instruction
    instr = 0
    todo = [[] for _ in range(WARPS)]  # per warp: positions of the current instruction still to consume

    def start(k: int) -> None:
        for w in range(WARPS):
            todo[w] = [first + p for p in range(pages_per_instr[k]) if p % WARPS == w]

    start(0)
    # Warp speeds differ a lot (scheduling unfairness is what lets warps drift).
    speed = [rng.choice([1, 1, 1, 5, 20]) for _ in range(WARPS)]
    while instr < len(pages_per_instr):
        actions = []
        if armed < total and (armed < PAGES or empty_done[armed % PAGES] >= armed // PAGES):
            actions.append(("arm", None))
        if in_flight:
            actions.append(("land", None))
        for w in range(WARPS):
            if todo[w]:
                actions += [("warp", w)] * speed[w]
        if not actions:  # every warp finished the instruction: the barrier at its end
            first += pages_per_instr[instr]
            instr += 1
            if instr < len(pages_per_instr):
                start(instr)
            continue
        kind, w = rng.choice(actions)
        if kind == "arm":
            in_flight.append(armed)
            armed += 1
        elif kind == "land":
            n = in_flight.pop(rng.randrange(len(in_flight)))  # copies land in any order
            slot = n % PAGES
            holds[slot] = n
            full_done[slot] += 1
        else:
            n = todo[w][0]
            slot, parity = n % PAGES, (n // PAGES) & 1
            if check_issued and armed <= n:
                continue  # wait_page_issued: keep spinning
            if (full_done[slot] & 1) == parity:
                continue  # try_wait.parity: phase not complete yet
            if holds[slot] != n:
                return f"seed {seed}: warp {w} passed its wait for position {n}, slot holds {holds[slot]}"
            todo[w].pop(0)
            empty_done[slot] += 1
    return None


@pytest.mark.parametrize("seed", range(40))
def test_ring_with_issued_check_never_reads_a_wrong_page(seed: int) -> None:
    rng = random.Random(1000 + seed)
    instrs = [rng.choice([1, 4, 6, 16, 32, 60]) for _ in range(12)]
    assert run_ring(instrs, seed, check_issued=True) is None


def test_ring_without_issued_check_does_read_a_wrong_page() -> None:
    """The model is sharp enough to see the original bug (so the test above can fail)."""
    failures = [run_ring([60] * 6, seed, check_issued=False) for seed in range(40)]
    assert any(failures), "parity-only waits never misfired: the model lost the drift it must exhibit"
