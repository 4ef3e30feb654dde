"""Many-query attention on the tensor cores (csrc/interpreter/attention_tiles.cuh) against the VM: prompt chunks
of head_dim 64 and 128 (and 96, stored in 128) whose ATTN_PARTIAL tasks have 16 or more (token, head) rows, over
one KV page per split (many splits, most of them past some queries' positions), a second chunk after the first
(keys from both), ragged last row blocks and more than one round of 128 rows; every buffer and the KV cache within
the usual tolerance, and the CUDA-core path (attn_tiles=0) on the same steps for comparison."""
from __future__ import annotations

import dataclasses

import pytest

from tests.gpu.mk_helpers import pair, small, steps_match_vm
from tests.gpu.test_megakernel_mma_matvec import scaled_weights, tolerance
from tests.vm.helpers import Scenario

# The token groups' cut on both sides (tests/gpu/test_megakernel_token_groups.py): the same instruction tensors.
GROUPS = {"token_group": 8, "held_pages": 9, "page_bytes": 16384}
# Layer 1's K and V follow layer 0's attention, whose scores and weights the tensor cores take in bf16: a 600-token
# prompt's cache exceeded the CUDA-core path's 2e-2 (H200) while every buffer stayed within tolerance (a wrong key,
# row or split is off by O(1)).
KV_TOLERANCE = 4e-2

pytestmark = pytest.mark.gpu


def _config(hd: int):
    """Two layers, GQA 4 (8 q heads, 2 KV heads), 512 wide."""
    return dataclasses.replace(small(512, 8, 2, hd, 1024, 2, 1000), max_position_embeddings=4096)


@pytest.mark.parametrize("tiles", [True, False], ids=["tiles", "cuda-cores"])
@pytest.mark.parametrize("hd", [64, 96, 128])
def test_prompt_chunks_match_vm(hd: int, tiles: bool) -> None:
    cfg = _config(hd)
    vm, gpu = pair(scaled_weights(cfg, seed=hd + 11), "lpt", num_pages=96, gpu_kw={"attn_tiles": tiles}, **GROUPS)
    scen = Scenario(cfg, [203, 37, 70], page_size=16, num_pages=96, seed=5)
    # 203 tokens in steps of 150 and 53 (rows of 600 and 212 per task: several rounds, ragged blocks), a 37-token
    # prompt beside them, then a 70-token prompt next to decodes.
    plans = [[150, 37, 0], [None, 1, 0], [1, 1, None], [1, 1, 1]]
    steps_match_vm(vm, gpu, scen, plans, f"hd{hd}-{'tiles' if tiles else 'cuda-cores'}",
                   lambda name: tolerance(name, True), check_kv=True, kv_tolerance=KV_TOLERANCE)


def test_one_split_and_query_parts_match_vm() -> None:
    """Large splits (8 pages each) and the default query parts: each task covers many keys of a long context."""
    cfg = _config(64)
    vm, gpu = pair(scaled_weights(cfg, seed=3), "lpt", num_pages=96, min_pages_per_split=8, **GROUPS)
    scen = Scenario(cfg, [600], page_size=16, num_pages=96, seed=6)
    steps_match_vm(vm, gpu, scen, [[300], [None], [1], [1]], "long", lambda name: tolerance(name, True), check_kv=True,
                   kv_tolerance=KV_TOLERANCE)
