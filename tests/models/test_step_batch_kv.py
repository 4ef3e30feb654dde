"""StepBatch packing/validation and the paged KV cache's slot mapping, write and gather."""
from __future__ import annotations

import pytest
import torch
from llama_testlib import fresh_seed, small_config

from models.llama.kv_cache import PagedKVCache
from models.llama.step_batch import StepBatch

CFG = small_config(heads=4, kv_heads=2, head_dim=8)


def test_build_packs_fields() -> None:
    b = StepBatch.build([[5, 6, 7], [9]], [0, 17], [[3], [4, 0]], page_size=16)
    assert b.token_ids.tolist() == [5, 6, 7, 9] and b.token_ids.dtype == torch.int64
    assert b.positions.tolist() == [0, 1, 2, 17]
    assert b.query_start.tolist() == [0, 3, 4] and b.context_lens.tolist() == [3, 18]
    assert b.block_tables.dtype == torch.int32 and b.block_tables.tolist() == [[3, -1], [4, 0]]
    assert (b.num_seqs, b.num_tokens) == (2, 4) and b.last_token_indices().tolist() == [2, 3]


@pytest.mark.parametrize("args,match", [
    (([[1]], [0, 0], [[0]]), "start_positions"),
    (([[]], [0], [[0]]), "no new tokens"),
    (([[1, 2]], [-1], [[0]]), "negative"),
    (([[1] * 5], [12], [[0]]), "needs 2 pages"),
    (([[1]], [0], [[-1]]), "negative page"),
    (([[1] * 20], [0], [[2, 2]]), "repeats"),
    (([], [], []), "at least one"),
])
def test_build_rejects_bad_input(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StepBatch.build(*args, page_size=16)


def test_write_then_gather_round_trips_through_pages() -> None:
    g = torch.Generator().manual_seed(fresh_seed())
    kv = PagedKVCache.allocate(CFG, num_pages=6, page_size=4, dtype=torch.float32)
    assert kv.k.shape == (2, 6, 2, 4, 8)
    assert kv.bytes_per_page == 2 * 2 * 2 * 4 * 8 * 4
    tables = [[5, 1, 3], [0, 4]]
    b = StepBatch.build([list(range(9)), list(range(6))], [0, 2], tables, page_size=4)
    pages, rows = kv.slot_mapping(b)
    assert pages.tolist() == [5, 5, 5, 5, 1, 1, 1, 1, 3, 0, 0, 4, 4, 4, 4]
    assert rows.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 2, 3, 0, 1, 2, 3]
    k_new = torch.randn(15, 2, 8, generator=g)
    v_new = torch.randn(15, 2, 8, generator=g)
    kv.write(1, pages, rows, k_new, v_new)
    k0, v0 = kv.gather(1, b.block_tables[0], 9)
    assert torch.equal(k0, k_new[:9]) and torch.equal(v0, v_new[:9])
    k1, _ = kv.gather(1, b.block_tables[1], 8)
    assert torch.equal(k1[2:], k_new[9:])
    assert torch.count_nonzero(kv.k[0]) == 0  # the other layer is untouched


def test_slot_mapping_rejects_page_outside_cache() -> None:
    kv = PagedKVCache.allocate(CFG, num_pages=2, page_size=4, dtype=torch.float32)
    b = StepBatch.build([[1, 2]], [0], [[7]], page_size=4)
    with pytest.raises(ValueError, match="page 7"):
        kv.slot_mapping(b)
