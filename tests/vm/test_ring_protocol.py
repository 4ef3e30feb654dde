"""A model of the interpreter's weight-page ring (csrc/interpreter/roles.cuh, consumer_matvec.cuh,
state.cuh) under random warp schedules, to pin down the protocol the CUDA code implements.

The loader arms ring positions in order (position n may be armed once position n - PAGES was consumed);
a bulk copy lands some time later and completes the page's `full` mbarrier phase. Consumer warps take
an instruction's pages round-robin and drift apart; all warps meet at the end of each instruction. An
mbarrier parity wait only tells the phase of one parity from the one before it: `try_wait.parity(P)`
passes iff the barrier's current phase parity differs from P. The model checks that no consumer ever
passes its wait while the slot holds another position's page.

This is the bug behind the first GPU session's stalls: without the "wait until the loader armed n"
check (`wait_page_issued`), a fast warp could pass a wait two phases early. The model also covers the
run-time ring size (9..12 pages) and the loader's cap on copies in flight (it arms position n only after
position n - cap landed, by a parity wait on that page's `full` barrier), and the division-free ring
index arithmetic both roles use.
"""
from __future__ import annotations

import random

import pytest

PAGES = 9  # config.cuh MIN_RING_PAGES (the smallest ring a stream runs with)
MAX_PAGES = 12  # config.cuh MAX_RING_PAGES
WARPS = 8  # config.cuh NUM_CONSUMER_WARPS


def run_ring(pages_per_instr: list[int], seed: int, check_issued: bool, ring_pages: int = PAGES,
             cap: int = 0) -> str | None:
    """Simulate one launch; returns a description of the first violation, or None."""
    rng = random.Random(seed)
    R = ring_pages
    total = sum(pages_per_instr)
    full_done = [0] * R  # completed phases of each page's full barrier
    empty_done = [0] * R  # completed phases of each page's empty barrier
    holds = [-1] * R  # position whose bytes sit in each slot (after its copy landed)
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
        slot_free = armed < R or empty_done[armed % R] >= armed // R
        # the cap: a parity wait on position armed - cap's full barrier (roles.cuh), as the kernel does it
        old = armed - cap
        under_cap = not 0 < cap < R or old < 0 or (full_done[old % R] & 1) != ((old // R) & 1)
        if armed < total and slot_free and under_cap:
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
            if 0 < cap < R and len(in_flight) > cap:
                return f"seed {seed}: {len(in_flight)} copies in flight with a cap of {cap}"
        elif kind == "land":
            n = in_flight.pop(rng.randrange(len(in_flight)))  # copies land in any order
            slot = n % R
            holds[slot] = n
            full_done[slot] += 1
        else:
            n = todo[w][0]
            slot, parity = n % R, (n // R) & 1
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


@pytest.mark.parametrize("pages,cap", [(9, 3), (12, 3), (12, 2), (11, 0), (10, 8)])
@pytest.mark.parametrize("seed", range(12))
def test_ring_sizes_and_inflight_cap_keep_the_protocol(pages: int, cap: int, seed: int) -> None:
    rng = random.Random(2000 + seed)
    instrs = [rng.choice([1, 4, 6, 16, 32, 60]) for _ in range(10)]
    assert run_ring(instrs, seed, check_issued=True, ring_pages=pages, cap=cap) is None


def consumer_positions(cur: int, n_pages: int, warp: int, ring_pages: int) -> list[tuple[int, int, int]]:
    """consume_pages' walk (consumer_matvec.cuh): (position, slot, round) without a division per page."""
    first = cur + warp
    slot, rnd, out = first % ring_pages, first // ring_pages, []
    for p in range(warp, n_pages, WARPS):
        out.append((cur + p, slot, rnd))
        slot += WARPS
        if slot >= ring_pages:
            slot -= ring_pages
            rnd += 1
    return out


def loader_positions(n_total: int, ring_pages: int, cap: int) -> list[tuple[int, int, int, int, int]]:
    """run_loader's walk (roles.cuh): (position, slot, round, capped slot, capped round)."""
    slot = rnd = 0
    out = []
    for n in range(n_total):
        old_slot = slot - cap if slot >= cap else slot + ring_pages - cap
        old_rnd = rnd if slot >= cap else rnd - 1
        out.append((n, slot, rnd, old_slot, old_rnd))
        slot += 1
        if slot == ring_pages:
            slot, rnd = 0, rnd + 1
    return out


@pytest.mark.parametrize("ring_pages", range(PAGES, MAX_PAGES + 1))
def test_division_free_ring_indices_equal_the_divisions(ring_pages: int) -> None:
    for cur in (0, 5, 8, 9, 11, 12, 100, 1001):
        for n_pages in (1, 6, 8, 9, 13, 32, 245):
            for warp in range(WARPS):
                for n, slot, rnd in consumer_positions(cur, n_pages, warp, ring_pages):
                    assert (slot, rnd) == (n % ring_pages, n // ring_pages)
    for cap in (1, 2, 3, ring_pages - 1):
        for n, slot, rnd, old_slot, old_rnd in loader_positions(300, ring_pages, cap):
            assert (slot, rnd) == (n % ring_pages, n // ring_pages)
            if n >= cap:  # the kernel only waits on position n - cap once it exists
                assert (old_slot, old_rnd) == ((n - cap) % ring_pages, (n - cap) // ring_pages)
