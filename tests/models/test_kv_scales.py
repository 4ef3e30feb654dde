"""An fp8 KV cache's scales from the weights (models/llama/kv_scales.py): every key and value a forward pass writes
fits e4m3 without saturating, whatever the input, and the typical ones sit far above its subnormals; the backends
allocate their fp8 caches with them."""
from __future__ import annotations

import torch

from engine.backends.torch_backend import TorchBackend
from engine.backends.vm_backend import VMBackend
from models.llama.fp8 import FP8_MAX, Fp8Scheme
from models.llama.kv_cache import FP8_KV
from models.llama.kv_scales import kv_scales
from models.llama.step_batch import StepBatch
from models.llama.weights import quantize_weights
from tests.gpu.mk_helpers import small
from tests.vm.helpers import random_weights

FP8_MIN_NORMAL = 2.0 ** -6


def _written_kv(weights, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values [layers, T, kv_heads, head_dim] a bf16-free prefill of `tokens` writes (fp32 cache)."""
    backend = TorchBackend(weights, num_pages=4, page_size=16, device=torch.device("cpu"), kv_dtype=torch.float32)
    batch = StepBatch.build([tokens], [0], [[0, 1, 2, 3]], page_size=16)
    backend.forward(batch)
    n = len(tokens)
    return backend.kv.k[:, 0, :, :n].transpose(1, 2), backend.kv.v[:, 0, :, :n].transpose(1, 2)


def test_no_key_or_value_saturates_and_the_typical_ones_stay_normal() -> None:
    cfg = small(256, 4, 2, 64, 512, 2, 300)
    weights = random_weights(cfg, seed=5)
    k_scale, v_scale = kv_scales(weights)
    assert k_scale.shape == v_scale.shape == (2, 2) and k_scale.dtype == torch.float32
    for seed in range(3):
        tokens = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(seed)).tolist()
        k, v = _written_kv(weights, tokens)
        for x, scale in ((k, k_scale), (v, v_scale)):
            scaled = x / scale[:, None, :, None]
            assert float(scaled.abs().max()) <= FP8_MAX  # the bound holds for any input
            # half the values at least 2^6 above e4m3's smallest normal: three mantissa bits kept
            assert float(scaled.abs().median()) >= 64 * FP8_MIN_NORMAL


def test_an_all_zero_head_gets_scale_one_and_fp8_matrices_are_read_as_their_values() -> None:
    cfg = small(256, 4, 2, 64, 512, 1, 300)
    weights = random_weights(cfg, seed=6)
    with torch.no_grad():
        weights.layers[0].k_proj[:64].zero_()  # KV head 0's key rows
    k_scale, v_scale = kv_scales(weights)
    assert float(k_scale[0, 0]) == 1.0 and float(k_scale[0, 1]) != 1.0
    fp8 = quantize_weights(weights, Fp8Scheme("channel"))
    k8, v8 = kv_scales(fp8)
    assert torch.allclose(v8, v_scale, rtol=0.1)


def test_backends_allocate_fp8_caches_with_them() -> None:
    cfg = small(256, 4, 2, 64, 512, 2, 300)
    weights = random_weights(cfg, seed=7)
    want = kv_scales(weights)
    torch_kv = TorchBackend(weights, num_pages=4, page_size=16, device=torch.device("cpu"), kv_dtype=FP8_KV).kv
    vm_kv = VMBackend(weights, num_pages=4, page_size=16, kv_dtype=FP8_KV).kv
    for kv in (torch_kv, vm_kv):
        assert kv.k_scale is not None and kv.v_scale is not None
        assert torch.equal(kv.k_scale, want[0]) and torch.equal(kv.v_scale, want[1])
