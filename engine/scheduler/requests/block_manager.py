"""Paged KV-cache page allocator keyed by sequence id. Plain Python: no torch here.

Token at position `p` of a sequence lives in page `block_table[p // page_size]`, row `p % page_size`
(docs/ARCHITECTURE.md). This module only hands out page ids; the tensors live in
`models.llama.kv_cache.PagedKVCache`.

Every page carries a reference count so that a page could be shared between tables (prefix sharing, refcount
> 1); with no prefix sharing each page is held by exactly one table (refcount 0 or 1).
"""
from __future__ import annotations

from collections import deque


def _check_count(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"BlockManager: {name} must be an int >= {minimum}, got {value!r}")
    return value


class BlockManager:
    def __init__(self, num_pages: int, page_size: int) -> None:
        self.num_pages = _check_count(num_pages, "num_pages", 1)
        self.page_size = _check_count(page_size, "page_size", 1)
        # FIFO reuse: a freed page goes to the back, so recently freed pages are reused last. That keeps
        # stale K/V of a just-finished sequence around longest, which makes use-after-free bugs in a
        # backend show up as wrong tokens in tests rather than hide behind a lucky re-write.
        self._free: deque[int] = deque(range(num_pages))
        self._ref_counts: list[int] = [0] * num_pages
        self._tables: dict[str, list[int]] = {}

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_used_pages(self) -> int:
        return self.num_pages - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of pages in use, in [0, 1]."""
        return self.num_used_pages / self.num_pages

    def pages_needed(self, num_tokens: int) -> int:
        """Pages that hold `num_tokens` tokens (ceil division)."""
        n = _check_count(num_tokens, "num_tokens", 0)
        return -(-n // self.page_size)

    def num_new_pages_needed(self, seq_id: str, num_tokens: int) -> int:
        """Pages `ensure_capacity(seq_id, num_tokens)` would have to allocate (0 if it already fits)."""
        have = len(self._tables.get(seq_id, ()))
        return max(0, self.pages_needed(num_tokens) - have)

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether a new sequence of `num_tokens` tokens fits in the free pages right now."""
        return self.pages_needed(num_tokens) <= len(self._free)

    # ---- per-sequence ------------------------------------------------------------------------
    def has(self, seq_id: str) -> bool:
        return seq_id in self._tables

    def ensure_capacity(self, seq_id: str, num_tokens: int) -> bool:
        """Grow `seq_id`'s block table so it holds `num_tokens` tokens. All-or-nothing: if the free pages
        do not suffice, nothing is allocated (no table is created either) and False is returned.
        Never shrinks a table."""
        if not isinstance(seq_id, str) or not seq_id:
            raise ValueError(f"BlockManager.ensure_capacity: seq_id must be a non-empty str, got {seq_id!r}")
        missing = self.num_new_pages_needed(seq_id, num_tokens)
        if missing > len(self._free):
            return False
        table = self._tables.setdefault(seq_id, [])
        for _ in range(missing):
            page = self._free.popleft()
            # A page on the free list must be unreferenced; anything else means our own bookkeeping
            # broke, and handing it out would let two sequences overwrite each other's K/V.
            assert self._ref_counts[page] == 0, f"page {page} on the free list has refcount {self._ref_counts[page]}"
            self._ref_counts[page] = 1
            table.append(page)
        return True

    def free(self, seq_id: str) -> None:
        """Release every page of `seq_id`. Idempotent: freeing an unknown/already-freed id is a no-op."""
        table = self._tables.pop(seq_id, None)
        if table is None:
            return
        # Release in reverse so the sequence's last pages (least likely to be a shared prefix) go first.
        for page in reversed(table):
            self._ref_counts[page] -= 1
            assert self._ref_counts[page] >= 0, f"page {page} refcount went negative"
            if self._ref_counts[page] == 0:
                self._free.append(page)

    def block_table(self, seq_id: str) -> list[int]:
        """A copy of `seq_id`'s page ids (empty if it holds none)."""
        return list(self._tables.get(seq_id, ()))

    def num_pages_of(self, seq_id: str) -> int:
        return len(self._tables.get(seq_id, ()))

    def ref_count(self, page: int) -> int:
        if isinstance(page, bool) or not isinstance(page, int) or not 0 <= page < self.num_pages:
            raise ValueError(f"BlockManager.ref_count: page must be an int in [0, {self.num_pages}), got {page!r}")
        return self._ref_counts[page]

    def seq_ids(self) -> list[str]:
        """Ids of the sequences that hold pages (a snapshot)."""
        return list(self._tables)

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent. O(num_pages); for tests/debugging."""
        held = [0] * self.num_pages
        for seq_id, table in self._tables.items():
            for page in table:
                held[page] += 1
        free = set(self._free)
        assert len(free) == len(self._free), "a page is on the free list twice"
        for page in range(self.num_pages):
            assert held[page] == self._ref_counts[page], (
                f"page {page}: held by {held[page]} tables but refcount {self._ref_counts[page]}"
            )
            assert (page in free) == (held[page] == 0), f"page {page}: free-list membership disagrees with refcount"
