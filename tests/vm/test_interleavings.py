"""Random SM interleavings and different policies produce bit-identical results; bf16 weights work."""
from __future__ import annotations

import torch

from engine.backends.vm_backend import VMBackend
from models.llama.model import LlamaModel
from models.llama.kv_cache import PagedKVCache
from tests.vm.helpers import Scenario, random_weights, small_config


def _run(w, cfg, policy: str, seed: int, dtype=None) -> list[torch.Tensor]:  # noqa: ANN001
    vm = VMBackend(w, 64, 8, num_sms=6, policy=policy, seed=seed, check_races=False, weight_dtype=dtype,
                   mlp_slices=3)
    sc = Scenario(cfg, [10, 3], 8, 64, seed=4)
    out = []
    for chunk in ([None, None], [1, 1], [1, 1]):
        batch, seqs = sc.batch(chunk)
        out.append(vm.forward(batch))
        sc.feed(seqs, vm.last_tokens.tolist())
    return out


def test_interleavings_and_policies_are_bit_identical() -> None:
    cfg = small_config(heads=4, kv_heads=2, inter=96)
    w = random_weights(cfg, seed=9)
    base = _run(w, cfg, "rr", seed=0)
    for policy, seed in [("rr", 1), ("rr", 2), ("rr", 3), ("lpt", 4), ("dynamic", 5), ("dynamic", 6)]:
        other = _run(w, cfg, policy, seed)
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
