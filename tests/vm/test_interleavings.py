"""Random SM interleavings and different policies produce bit-identical results; bf16 weights work."""
from __future__ import annotations

import pytest
import torch

from models.llama.model import LlamaModel
from models.llama.kv_cache import PagedKVCache
from tests.vm.helpers import Scenario, expect_fused, random_weights, run_vm, small_config


def _run(w, cfg, policy: str, seed: int, dtype=None) -> list[torch.Tensor]:  # noqa: ANN001
    return run_vm(w, cfg, [10, 3], [[None, None], [1, 1], [1, 1]], 4, num_sms=6, policy=policy, seed=seed,
                  check_races=False, weight_dtype=dtype, mlp_slices=3)


# name -> (config, prompt lens, schedule, VM keywords): two sequences on the split-attention path, and
# one sequence on the fused path (ATTN_O_PROJ: its atomic adds into mid / hidden) with races checked.
SCENARIOS = {
    "split": (dict(heads=4, kv_heads=2, inter=96), [10, 3], [[None, None], [1, 1], [1, 1]],
              dict(num_sms=6, check_races=False, after_step=expect_fused(False))),
    "fused": (dict(heads=8, kv_heads=2, head_dim=128, inter=96), [10], [[4], [None], [1], [1]],
              dict(num_sms=12, check_races=True, max_attn_splits=1, fuse_o_proj=True, after_step=expect_fused(True))),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_interleavings_and_policies_are_bit_identical(name: str) -> None:
    cfg_kw, prompts, schedule, vm_kw = SCENARIOS[name]
    cfg = small_config(**cfg_kw)
    w = random_weights(cfg, seed=9)
    run = lambda policy, seed: run_vm(w, cfg, prompts, schedule, 4, policy=policy, seed=seed,  # noqa: E731
                                      mlp_slices=3, **vm_kw)
    base = run("rr", 0)
    for policy, seed in [("rr", 1), ("rr", 2), ("rr", 3), ("lpt", 4), ("dynamic", 5), ("dynamic", 6)]:
        other = run(policy, seed)
        assert all(torch.equal(a, b) for a, b in zip(base, other)), (policy, seed)


def test_bf16_weights_close_to_reference() -> None:
    cfg = small_config()
    w = random_weights(cfg, seed=2)
    got = _run(w, cfg, "lpt", seed=0, dtype=torch.bfloat16)
    ref = LlamaModel(w)
    kv = PagedKVCache.allocate(cfg, 64, 8, dtype=torch.float32)
    sc = Scenario(cfg, [10, 3], 8, 64, seed=4)
    for step, chunk in enumerate(([None, None], [1, 1], [1, 1])):
        batch, seqs = sc.batch(chunk)
        want = ref.forward(batch, kv)
        assert (want - got[step]).abs().max() < 0.05 * want.abs().max(), step
        sc.feed(seqs, got[step].argmax(-1).tolist())
