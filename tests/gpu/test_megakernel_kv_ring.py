"""Decode attention with its earlier keys streamed through the page ring (csrc/interpreter/kv_stream.cuh)
against the VM, and the global-memory key path it replaces (attn_kv_ring=False): contexts long enough that
one attention's KV pages outnumber the ring (the stream wraps it), one split or many, next to a short
sequence in the same batch, and a fresh sequence whose only key is the new one."""
from __future__ import annotations

import pytest
import torch

from tests.gpu.mk_helpers import BUFFERS, pair, rel_err, small
from tests.vm.helpers import Scenario, random_weights

pytestmark = pytest.mark.gpu

# head_dim 128, page_size 16: two KV pages per 16 KB ring page, so 410 tokens take 13 ring pages (> 12).
CFG = small(512, 8, 2, 128, 1024, 1, 1000)


@pytest.mark.parametrize("kv_ring", [True, False])
@pytest.mark.parametrize("splits", [1, None])
def test_long_context_decode_matches_vm(kv_ring: bool, splits: int | None) -> None:
    vm, gpu = pair(random_weights(CFG, seed=11), "lpt", num_pages=64, max_attn_splits=splits,
                   min_pages_per_split=4, gpu_kw={"attn_kv_ring": kv_ring})
    scen = Scenario(CFG, [410, 20, 1], page_size=16, num_pages=64, seed=6)
    chunk = min(gpu.max_tokens_per_step // 2, 64)
    plans: list[list[int | None]] = []
    for _ in range(-(-410 // chunk)):
        plans.append([chunk, 0, 0])
    plans += [[0, None, 0], [1, 1, None]] + [[1, 1, 1]] * 3  # the third prompt is one token: decode at C=1
    for step, plan in enumerate(plans):
        batch, seqs = scen.batch(plan)
        if not seqs:
            continue
        ref_logits = vm.forward(batch)
        vm_tokens = vm.last_tokens
        gpu_tokens = gpu.greedy(batch)
        vm_bufs, _ = vm.last_stream.backend_state
        for name in BUFFERS:
            err = rel_err(gpu.last.acts[name], vm_bufs.get(name))
            assert err < 2e-2, f"kv_ring={kv_ring} splits={splits}: {name} differs (rel {err:.2e}) at step {step}"
        top2 = torch.topk(ref_logits, 2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 1e-2 * top2[:, 0].abs().clamp_min(1)
        assert torch.equal(gpu_tokens.cpu()[clear], vm_tokens[clear]), f"step {step}: greedy ids differ"
        scen.feed(seqs, vm_tokens.tolist())
