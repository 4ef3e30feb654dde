"""Steps of more tokens than one matvec takes, on the GPU against the VM on the same instruction tensors: each
weight-streaming instruction runs its token groups over pages it keeps in the ring (csrc/interpreter/
token_groups.cuh). Shapes: a 2048-wide model (4 rows per 16 KB page: the 1B's pages, cut to fit the 9-page ring)
and a 512-wide one (many rows per page); steps: prompts of several groups with ragged last groups, decodes of
more sequences than a group (the LM head in groups), and both in one step; groups of 8 rows (the CUDA cores' size)
and of 16 (config.cuh MAX_TOKEN_GROUP, on the tensor cores: the cuda backend's default where the model allows it)."""
from __future__ import annotations

import pytest

from tests.gpu.mk_helpers import pair, small, steps_match_vm
from tests.gpu.test_megakernel_mma_matvec import scaled_weights, tolerance
from tests.vm.helpers import Scenario

pytestmark = pytest.mark.gpu

SHAPES = {
    "rows-2048": small(2048, 32, 8, 64, 8192, 2, 512),
    "rows-512": small(512, 8, 2, 64, 1024, 2, 384),
}


@pytest.mark.parametrize("group", [8, 16])
@pytest.mark.parametrize("policy", ["dynamic", "lpt"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_steps_of_several_token_groups_match_vm(shape: str, policy: str, group: int) -> None:
    cfg = SHAPES[shape]
    vm, gpu = pair(scaled_weights(cfg, seed=31), policy, num_pages=128, gpu_kw={"mma_matvec": True},
                   token_group=group, held_pages=9, page_bytes=16384)
    assert gpu.max_tokens_per_step > group and gpu.token_group == group
    prompts = [37, 21, 9, 4, 3, 2, 2, 2, 1, 1, 1, 1]
    scen = Scenario(cfg, prompts, page_size=16, num_pages=128, seed=12)
    plans: list[list[int | None]] = [
        [30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # one sequence, 4 groups (the last of 6)
        [7] + prompts[1:],  # the rest of every prompt: 12 sequences, 53 tokens
        [1] * 12, [1] * 12,  # decodes: 12 sequences, the LM head in two groups
    ]
    steps_match_vm(vm, gpu, scen, plans, f"{shape} {policy} token groups", lambda name: tolerance(name, True),
                   check_kv=True)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_lm_head_written_directly_matches_vm(shape: str) -> None:
    """KernelOptions.lm_head_direct: decodes of 12 sequences (one group of 16) whose LM head blocks the out buffer
    does not cap, the products written straight into the logits and scaled there (ops/lm_head.cuh)."""
    cfg = SHAPES[shape]
    vm, gpu = pair(scaled_weights(cfg, seed=33), "lpt", num_pages=128,
                   gpu_kw={"mma_matvec": True, "lm_head_direct": True}, token_group=16, held_pages=9,
                   page_bytes=16384, lm_head_direct_max_seqs=16)
    prompts = [9, 7, 5, 4, 3, 2, 2, 2, 1, 1, 1, 1]
    scen = Scenario(cfg, prompts, page_size=16, num_pages=128, seed=14)
    plans: list[list[int | None]] = [list(prompts), [1] * 12, [1] * 12]
    steps_match_vm(vm, gpu, scen, plans, f"{shape} direct LM head", lambda name: tolerance(name, True), check_kv=True)
