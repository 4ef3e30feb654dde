"""Decode attention with its earlier keys streamed through the page ring (csrc/interpreter/kv_stream.cuh)
against the VM, and the global-memory key path it replaces (attn_kv_ring=False): a context long enough
that one attention's KV pages outnumber the ring (the stream wraps it), one split or many, next to a short
sequence in the same batch and a fresh one whose only key is the new one; with and without the ops' last
pages held past their release (defer_free_pages)."""
from __future__ import annotations

import pytest

from tests.gpu.mk_helpers import pair, small, steps_match_vm
from tests.vm.helpers import Scenario, random_weights

pytestmark = pytest.mark.gpu

# head_dim 128, page_size 16: two KV pages per 16 KB ring page; 300 tokens are 19 KV pages, i.e. 10 ring
# pages with one split, more than the 9-page ring these tests ask for.
CFG = small(512, 8, 2, 128, 1024, 1, 1000)
PROMPT = 300


@pytest.mark.parametrize("kv_ring,splits,defer", [(True, 1, 0), (True, None, 0), (False, 1, 8), (True, None, 8),
                                                 (True, 1, 8)])
def test_long_context_decode_matches_vm(kv_ring: bool, splits: int | None, defer: int) -> None:
    vm, gpu = pair(random_weights(CFG, seed=11), "lpt", num_pages=64, max_attn_splits=splits,
                   min_pages_per_split=4, gpu_kw={"attn_kv_ring": kv_ring, "defer_free_pages": defer,
                                                  "max_ring_pages": 9})
    scen = Scenario(CFG, [PROMPT, 20, 1], page_size=16, num_pages=64, seed=6)
    chunk = gpu.max_tokens_per_step
    plans: list[list[int | None]] = [[chunk, 0, 0]] * -(-PROMPT // chunk) + [[0, chunk, 0]] * -(-20 // chunk)
    plans += [[1, 1, None]] + [[1, 1, 1]] * 3  # the third prompt is one token: its first decode has C = 1
    steps_match_vm(vm, gpu, scen, plans, f"kv_ring={kv_ring} splits={splits}")
    assert gpu.last.ring_pages == 9


# The ring path folds keys a pass at a time (32 / (head_dim / 32) keys: csrc/interpreter/attention_pass.cuh):
# page sizes below, equal to and above a pass, with several KV pages per ring page and GQA groups of 2-8. These
# contexts take at most a ring page per warp, so they fold by (KV page, head) (attn_head_units); the last case
# folds by ring page, as longer contexts do.
@pytest.mark.parametrize("cfg,page_size,head_units", [(small(256, 4, 2, 64, 512, 1, 300), 32, True),
                                                      (small(256, 8, 1, 32, 512, 1, 256), 8, True),
                                                      (small(512, 8, 2, 128, 1024, 1, 1000), 8, True),
                                                      (small(512, 8, 1, 64, 1024, 1, 300), 16, True),
                                                      (small(512, 4, 1, 128, 1024, 1, 300), 16, True),
                                                      (small(512, 8, 1, 64, 1024, 1, 300), 16, False)],
                         ids=["hd64-ps32", "hd32-ps8", "hd128-ps8", "hd64-g8-ps16", "hd128-g4-ps16",
                              "hd64-g8-ps16-by-ring-page"])
def test_ring_decode_other_page_sizes_matches_vm(cfg, page_size: int, head_units: bool) -> None:  # noqa: ANN001
    vm, gpu = pair(random_weights(cfg, seed=5), "lpt", num_pages=64, page_size=page_size,
                   gpu_kw={"attn_head_units": head_units})
    scen = Scenario(cfg, [70, 3], page_size=page_size, num_pages=64, seed=9)
    chunk = gpu.max_tokens_per_step
    plans: list[list[int | None]] = [[chunk, 0]] * -(-70 // chunk) + [[0, 3]] + [[1, 1]] * 4
    steps_match_vm(vm, gpu, scen, plans, f"page_size={page_size} head_units={head_units}")
