"""BlockManager: unit tests plus a randomized property test against a reference model."""
from __future__ import annotations

import math
import random

import pytest

from engine.scheduler.requests.block_manager import BlockManager


def test_basic_allocate_grow_free() -> None:
    bm = BlockManager(num_pages=6, page_size=4)
    assert bm.pages_needed(0) == 0 and bm.pages_needed(1) == 1 and bm.pages_needed(8) == 2
    assert bm.pages_needed(9) == 3
    assert bm.ensure_capacity("a", 5)
    assert len(bm.block_table("a")) == 2 and bm.num_used_pages == 2
    assert bm.ensure_capacity("a", 8)  # still 2 pages
    assert bm.num_used_pages == 2
    assert bm.ensure_capacity("a", 3)  # never shrinks
    assert len(bm.block_table("a")) == 2
    assert bm.ensure_capacity("b", 16)
    assert bm.num_free_pages == 0 and bm.usage == 1.0
    assert not bm.can_allocate(1)
    assert set(bm.block_table("a")).isdisjoint(bm.block_table("b"))
    bm.free("a")
    bm.free("a")  # idempotent
    assert bm.num_free_pages == 2 and math.isclose(bm.usage, 4 / 6)
    bm.free("never-seen")
    bm.check_invariants()


def test_all_or_nothing() -> None:
    bm = BlockManager(num_pages=4, page_size=2)
    assert bm.ensure_capacity("a", 4)  # 2 pages
    before = bm.block_table("a")
    assert not bm.ensure_capacity("a", 11)  # needs 6 pages total: 4 more, only 2 free
    assert bm.block_table("a") == before and bm.num_free_pages == 2
    assert not bm.ensure_capacity("b", 5)  # 3 pages, only 2 free
    assert not bm.has("b") and bm.num_free_pages == 2
    bm.check_invariants()


def test_block_table_is_a_copy() -> None:
    bm = BlockManager(num_pages=3, page_size=1)
    bm.ensure_capacity("a", 2)
    table = bm.block_table("a")
    table.append(2)
    assert bm.block_table("a") != table
    assert bm.ref_count(table[0]) == 1 and bm.ref_count(2) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: BlockManager(0, 4),
        lambda: BlockManager(4, 0),
        lambda: BlockManager(4, True),
        lambda: BlockManager(4, 2).pages_needed(-1),
        lambda: BlockManager(4, 2).ensure_capacity("a", -3),
        lambda: BlockManager(4, 2).ensure_capacity("", 3),
        lambda: BlockManager(4, 2).ref_count(4),
    ],
)
def test_bad_arguments(call) -> None:
    with pytest.raises(ValueError, match="BlockManager"):
        call()


@pytest.mark.parametrize("seed", range(6))
def test_random_ops_against_model(seed: int) -> None:
    rng = random.Random(seed * 7919 + 17)
    num_pages = rng.randrange(1, 40)
    page_size = rng.choice([1, 2, 3, 16])
    bm = BlockManager(num_pages, page_size)
    model: dict[str, int] = {}  # seq_id -> pages held
    tables: dict[str, list[int]] = {}  # what each live sequence was told, must stay stable
    ids = [f"s{k}" for k in range(rng.randrange(1, 12))]
    for _ in range(1500):
        sid = rng.choice(ids)
        op = rng.random()
        if op < 0.6:
            have = model.get(sid, 0)
            num_tokens = rng.randrange(0, (have + 4) * page_size + 1)
            want = max(have, -(-num_tokens // page_size))
            free = num_pages - sum(model.values())
            ok = bm.ensure_capacity(sid, num_tokens)
            assert ok == (want - have <= free)
            if ok and want > 0:
                model[sid] = want
            table = bm.block_table(sid)
            assert len(table) == model.get(sid, 0)
            # growth only appends: the existing prefix of the table must never change
            old = tables.get(sid, [])
            assert table[: len(old)] == old
            tables[sid] = table
        else:
            bm.free(sid)
            model.pop(sid, None)
            tables.pop(sid, None)
            assert bm.block_table(sid) == []
        used = sum(model.values())
        assert bm.num_used_pages == used and bm.num_free_pages == num_pages - used
        live = [p for t in tables.values() for p in t]
        assert len(live) == len(set(live)), "a page is held by two live sequences"
        assert all(0 <= p < num_pages for p in live)
        q = rng.randrange(0, 50)
        assert bm.can_allocate(q) == (-(-q // page_size) <= num_pages - used)
    bm.check_invariants()
    for sid in ids:
        bm.free(sid)
    assert bm.num_used_pages == 0 and bm.usage == 0.0
    bm.check_invariants()
    # every page is reusable: one sequence can now take the whole cache
    assert bm.ensure_capacity("all", num_pages * page_size)
    assert sorted(bm.block_table("all")) == list(range(num_pages))

