"""Properties of the paged forward: chunked prefill == one-shot prefill, batch invariance, independence
from which (shuffled, non-contiguous) pages hold the context, and mixed decode + prefill steps."""
from __future__ import annotations

import torch
from llama_testlib import PagedRunner, fresh_seed, random_prompts, random_weights, small_config

from models.llama.config import RopeScaling
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.step_batch import StepBatch

CFG = small_config(heads=4, kv_heads=2, head_dim=16, hidden=64,
                   rope=RopeScaling("llama3", 8.0, 1.0, 4.0, 32), tied=False)
TOL = 1e-5


def _setup() -> tuple[torch.Generator, object]:
    g = torch.Generator().manual_seed(fresh_seed())
    return g, random_weights(CFG, seed=int(torch.randint(0, 2**31, (1,), generator=g)))


def test_chunked_prefill_equals_one_shot() -> None:
    g, w = _setup()
    (prompt,) = random_prompts([45], CFG.vocab_size, g)
    whole = PagedRunner(w, 48, 1, g).step({0: prompt})[0]
    chunked = PagedRunner(w, 48, 1, g)
    for lo, hi in [(0, 7), (7, 8), (8, 30), (30, 45)]:  # chunks not aligned to the page size (4)
        last = chunked.step({0: prompt[lo:hi]})[0]
    assert (last - whole).abs().max() < TOL


def test_batch_invariance() -> None:
    g, w = _setup()
    prompts = random_prompts([9, 23, 2, 40], CFG.vocab_size, g)
    alone = PagedRunner(w, 48, 1, g).step({0: prompts[1]})[0]
    together = PagedRunner(w, 48, 4, g).step(dict(enumerate(prompts)))[1]
    assert (alone - together).abs().max() < TOL


def test_page_placement_does_not_matter() -> None:
    g, w = _setup()
    prompts = random_prompts([13, 30], CFG.vocab_size, g)
    model = LlamaModel(w)
    results = []
    for tables in ([[0, 1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11]],  # contiguous
                   [[17, 3, 9, 12], [0, 15, 6, 2, 11, 8, 19, 1]]):  # shuffled, interleaved
        kv = PagedKVCache.allocate(CFG, 20, 4, torch.float32)
        kv.k.normal_(generator=g)
        kv.v.normal_(generator=g)
        batch = StepBatch.build(prompts, [0, 0], tables, page_size=4)
        results.append(model.forward(batch, kv))
    assert torch.equal(results[0], results[1])


def test_mixed_decode_and_prefill_step() -> None:
    """One step holding a decode token, a mid-prompt prefill chunk and a fresh prompt equals running
    each of them on its own."""
    g, w = _setup()
    p = random_prompts([20, 33, 17], CFG.vocab_size, g)
    mixed = PagedRunner(w, 40, 3, g)
    mixed.step({0: p[0][:19], 1: p[1][:10]})
    out = mixed.step({0: p[0][19:], 1: p[1][10:], 2: p[2]})
    for s in range(3):
        solo = PagedRunner(w, 40, 1, g).step({0: p[s]})[0]
        assert (out[s] - solo).abs().max() < TOL, f"sequence {s}"


def test_bfloat16_runs_and_tracks_float32() -> None:
    g = torch.Generator().manual_seed(fresh_seed())
    seed = int(torch.randint(0, 2**31, (1,), generator=g))
    (prompt,) = random_prompts([25], CFG.vocab_size, g)
    ref = PagedRunner(random_weights(CFG, seed), 32, 1, g).step({0: prompt})[0]
    low = PagedRunner(random_weights(CFG, seed, torch.bfloat16), 32, 1, g)
    out = low.step({0: prompt})[0]
    assert out.dtype == torch.float32 and low.kv.k.dtype == torch.bfloat16
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()
