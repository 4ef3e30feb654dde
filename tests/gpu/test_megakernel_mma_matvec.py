"""Page matvecs on the tensor cores against the VM, on row lengths that reach each of their code paths: one
activation row (csrc/interpreter/dot_rows_mma.cuh) against the CUDA-core path it replaces (mma_matvec=False),
and several (dot_tokens_mma.cuh: steps of several tokens, 4 weight rows per product). Row lengths:
- hidden 4096: 2 rows per 16 KB page (the 2-row call, 4 chunks per iteration); with one MLP slice the
  down rows are 8192 long: 1 row per page (the row pair repeats its one real row);
- hidden 4096 with the default MLP slices: steps of up to 8 tokens (the 8B's step);
- hidden 640 / intermediate 1152: chunks that do not fill a whole iteration (the one-chunk tail), pages of
  12 and 7 rows (4-row calls, then a 2-row and a 1-row remainder).
The one-row test runs one sequence (a prompt in chunks, then greedy decodes); the several-row test three at
once, so its steps carry 1 to 8 tokens."""
from __future__ import annotations

import pytest
import torch

from models.llama.config import LlamaConfig
from models.llama.init_random import random_state_dict
from models.llama.weights import LlamaWeights, weights_from_state_dict
from tests.gpu.mk_helpers import pair, small, steps_match_vm
from tests.vm.helpers import Scenario

pytestmark = pytest.mark.gpu

SHAPES = {  # name: (config, split parameters shared by the VM and the GPU)
    "rows-4096-8192": (small(4096, 32, 8, 128, 8192, 1, 512), {"mlp_slices": 1}),
    "rows-640-1152": (small(640, 5, 1, 128, 1152, 2, 300), {}),
    # the 8B's row length with the default MLP slices: 8 tokens of bf16 x fit (4 of fp32)
    "rows-4096-sliced": (small(4096, 32, 8, 128, 8192, 1, 512), {}),
}


def scaled_weights(cfg: LlamaConfig, seed: int) -> LlamaWeights:
    """Random weights whose products have the spread tests.vm.helpers.random_weights gives a 512-wide model:
    at its fixed scale a 4096-wide model's attention scores reach +-40, so a softmax that picks one key
    turns any rounding (the tensor cores' bf16 x against the VM's fp32) into a different output."""
    scale = 5 * (512 / cfg.hidden_size) ** 0.5
    sd = random_state_dict(cfg, seed=seed, dtype=torch.float32)
    return weights_from_state_dict(cfg, {k: v if k.endswith("norm.weight") else v * scale for k, v in sd.items()},
                                   dtype=torch.float32)


def tolerance(buffer: str, mma: bool) -> float:
    """Max relative error against the fp32 VM. The tensor cores round x to bf16 (the VM does not): in the prompt
    chunks' steps too (several rows, dot_tokens_mma.cuh), so the rounding of every prompt token's K and V reaches
    the decodes after it; the attention output amplifies the rounding of q and k through the softmax. Measured
    at these tests' seeds (H200): attn_out 9.9e-2 at most, logits 2.0e-2, the other buffers within 2e-2 (over 8
    weight seeds of one-row steps alone: attn_out median 2.5e-2, max 5.3e-2). A wrong result is off by far more
    (a dropped row or split is O(1))."""
    if not mma:
        return 2e-2
    return 1.5e-1 if buffer in ("attn_out", "attn_bf16") else 4e-2  # attn_bf16: attn_out rounded to bf16


@pytest.mark.parametrize("mma", [True, False])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_batch1_matvec_matches_vm(shape: str, mma: bool) -> None:
    cfg, split_kw = SHAPES[shape]
    vm, gpu = pair(scaled_weights(cfg, seed=21), "dynamic", gpu_kw={"mma_matvec": mma}, **split_kw)
    scen = Scenario(cfg, [11], page_size=16, num_pages=64, seed=8)
    per_step = min(8, gpu.max_tokens_per_step)  # hidden 4096 leaves room for 2 tokens of x
    plans: list[list[int | None]] = [[per_step]] * -(-11 // per_step) + [[1]] * 4
    steps_match_vm(vm, gpu, scen, plans, f"{shape} mma={mma}", lambda name: tolerance(name, mma), check_kv=True)


def several_row_plans(prompts: list[int], limit: int, decodes: int) -> list[list[int | None]]:
    """Steps of at most `limit` tokens: the prompts in chunks (several sequences in one step where the budget
    leaves room), then `decodes` rounds of one token per sequence (split over steps when `limit` is smaller
    than the batch)."""
    plans: list[list[int | None]] = []
    left = list(prompts)
    while any(left):
        budget, plan = limit, []
        for s, n in enumerate(left):
            take = min(n, budget)
            plan.append(take)
            left[s] -= take
            budget -= take
        plans.append(plan)
    for _ in range(decodes):
        for first in range(0, len(prompts), limit):
            plans.append([1 if first <= s < first + limit else 0 for s in range(len(prompts))])
    return plans


@pytest.mark.parametrize("shape", list(SHAPES))
def test_several_rows_matvec_matches_vm(shape: str) -> None:
    cfg, split_kw = SHAPES[shape]
    vm, gpu = pair(scaled_weights(cfg, seed=23), "dynamic", gpu_kw={"mma_matvec": True}, **split_kw)
    prompts = [9, 6, 5]
    scen = Scenario(cfg, prompts, page_size=16, num_pages=64, seed=9)
    plans = several_row_plans(prompts, min(8, gpu.max_tokens_per_step), decodes=3)
    assert max(sum(p or 0 for p in plan) for plan in plans) >= min(8, gpu.max_tokens_per_step) > 1
    steps_match_vm(vm, gpu, scen, plans, f"{shape} several rows", lambda name: tolerance(name, True), check_kv=True)
