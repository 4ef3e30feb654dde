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


def test_the_step_budget_leaves_the_dummy_sequences_room(tiny_checkpoint: str) -> None:
    """The cuda backend pads steps of several token groups with dummy sequences of a token each: the scheduler's
    budget leaves them room, so a full step stays in its budget's token bucket (engine/cuda/step_padding.py)."""
    from engine.cuda.step_padding import bucket_up, padded_budget, padded_counts

    llm = LLM(tiny_checkpoint, backend="cuda", dtype="bfloat16", progress=False, max_num_seqs=64)
    backend, budget = llm.engine.backend, llm.engine.scheduler.config.max_num_batched_tokens
    wanted = min(llm.engine.engine_config.max_num_batched_tokens, backend.max_tokens_per_step)
    assert budget == backend.step_token_budget(wanted, 64)
    if wanted > backend.limits.max_tokens_per_matvec:  # steps this large are padded
        assert budget >= min(wanted, padded_budget(wanted, 64))
        assert all(padded_counts(budget, s)[0] <= bucket_up(wanted) for s in range(1, min(64, budget) + 1))
