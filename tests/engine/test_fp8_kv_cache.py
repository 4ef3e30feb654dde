"""An fp8 KV cache (`kv_cache_dtype="fp8"`, models/llama/kv_cache.py): e4m3 pages with a scale per layer and KV head,
read back within e4m3's rounding, half the bytes per page; through the engine close to the full-precision cache."""
from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.backends.torch_backend import TorchBackend
from engine.backends.vm_backend import VMBackend
from engine.bench.logprob_error import PAGE_SIZE, teacher_forced
from engine.engine_config import EngineConfig, kv_bytes_per_page
from engine.quantization import check_quantization
from models.llama.kv_cache import FP8_KV, PagedKVCache
from tests.models.llama_testlib import fresh_seed
from tests.models.llama_testlib import small_config as model_config
from tests.vm.helpers import random_weights, small_config

PROMPT = [5, 17, 300, 42, 9, 77, 1000, 3, 64, 128, 7, 11, 13, 500, 2, 19, 23]


def test_pages_hold_e4m3_rows_times_their_heads_scales() -> None:
    cfg = model_config(layers=2, kv_heads=2, head_dim=16)
    kv = PagedKVCache.allocate(cfg, num_pages=4, page_size=4, dtype=FP8_KV)
    assert kv.k.dtype == FP8_KV and kv.k_scale is not None and kv.k_scale.shape == (2, 2)
    kv.k_scale[1, 1] = 4.0  # a calibrated head: its rows are stored divided by 4
    g = torch.Generator().manual_seed(fresh_seed())
    k, v = torch.randn(3, 2, 16, generator=g) * 20, torch.randn(3, 2, 16, generator=g)
    pages, rows = torch.tensor([2, 0, 3]), torch.tensor([1, 3, 0])
    kv.write(1, pages, rows, k, v)
    got_k, got_v = kv.gather(1, torch.arange(4), 16)  # position p: page p // 4, row p % 4
    at = pages * 4 + rows
    assert got_k.dtype == torch.float32
    assert torch.allclose(got_k[at], k, rtol=2 ** -4, atol=2 ** -9 * 4)
    assert torch.allclose(got_v[at], v, rtol=2 ** -4, atol=2 ** -9)
    assert torch.equal(kv.k[1, 2, 1, 1].float() * 4, got_k[9, 1])  # stored / 4, read * 4
    assert kv.bytes_per_page * 2 == PagedKVCache.allocate(cfg, 4, 4, torch.bfloat16).bytes_per_page
    assert kv_bytes_per_page(cfg, 16, FP8_KV) * 2 == kv_bytes_per_page(cfg, 16, torch.bfloat16)


def _scores(ckpt: str, kv: str) -> torch.Tensor:
    llm = LLM(ckpt, backend="torch", dtype="float32", kv_cache_dtype=kv, progress=False, num_pages=32)
    out = llm.generate({"prompt_token_ids": PROMPT},
                       SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, prompt_logprobs=0))[0]
    assert out.prompt_logprobs is not None
    return torch.tensor([e[t] for t, e in zip(PROMPT[1:], out.prompt_logprobs[1:])], dtype=torch.float64)


def test_engine_with_an_fp8_cache_stays_near_the_full_one(tiny_checkpoint: str) -> None:
    drift = float((_scores(tiny_checkpoint, "fp8") - _scores(tiny_checkpoint, "auto")).abs().max())
    assert 0 < drift < 0.1, drift


def test_the_vm_reads_fp8_pages_as_the_torch_backend_does(tiny_checkpoint: str) -> None:
    """The VM's KV append divides by its head's scale and its attention multiplies, as PagedKVCache does (a scale
    other than 1 on every head, so a missing division or product shows)."""
    cfg = small_config(vocab=200)
    weights = random_weights(cfg, seed=fresh_seed() % 1000)
    torch_b = TorchBackend(weights, num_pages=4, page_size=PAGE_SIZE, device=torch.device("cpu"), kv_dtype=FP8_KV)
    vm_b = VMBackend(weights, num_pages=4, page_size=PAGE_SIZE, num_sms=12, kv_dtype=FP8_KV)
    for kv in (torch_b.kv, vm_b.kv):
        assert kv.k_scale is not None and kv.v_scale is not None
        kv.k_scale.fill_(0.5)
        kv.v_scale.fill_(2.0)
    tokens = torch.randint(0, cfg.vocab_size, (14,), generator=torch.Generator().manual_seed(4)).tolist()
    ref = teacher_forced(torch_b, tokens[:5], tokens[5:])
    got = teacher_forced(vm_b, tokens[:5], tokens[5:])
    # The two backends' keys and values differ in the last fp32 bits (their own matmul orders); where one lies on an
    # e4m3 rounding boundary the stored codes differ by a step of 1/8: 8 of the 1000 weight seeds moved a logprob by
    # 2e-4 to 4.7e-3. A dropped division by the scale moves them by 0.45 or more (the same seeds, checked by hand).
    assert torch.allclose(got, ref, atol=2e-2), (got - ref).abs().max()


def test_fp8_cache_is_refused_where_attention_reads_no_fp8() -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp8' runs on the torch and vm backends: the cuda"):
        check_quantization(EngineConfig(model="m", kv_cache_dtype="fp8"), "cuda")
    check_quantization(EngineConfig(model="m", kv_cache_dtype="fp8"), "vm")
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        EngineConfig(model="m", kv_cache_dtype="int8")
