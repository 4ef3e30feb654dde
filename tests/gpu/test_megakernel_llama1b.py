"""End to end on the Llama-3.2-1B shape (random bf16 weights): 128 greedy megakernel steps against the
torch reference on the GPU, teacher-forced on the megakernel's tokens. Every step must pick the
reference's argmax, or, at a near-tie, a token whose reference logit is within bf16 tolerance of it."""
from __future__ import annotations

import pytest
import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch

pytestmark = pytest.mark.gpu

PROMPT, NEW, PAGE = 32, 128, 16
# Reference logit gap (max - chosen) accepted as a bf16 near-tie. The reference's logits are bf16 (step
# 1/32 for logits in 4..8), and each run's max |logit diff| is 0.14-0.17, so a gap of a few steps is
# rounding, not a bug. Seen: up to 0.062 over ten sessions, then 0.094 (= 3/32) once (eleventh session,
# H200, dynamic; the 8B shape's step 0 too): 0.125 = 4 steps.
NEAR_TIE = 0.125


# lpt/rr used to stall one LM_HEAD block intermittently (weight-ring parity ambiguity, fixed by
# wait_page_issued in csrc/interpreter/state.cuh); 128 steps per policy give the stall many chances.
# The last case runs the opt-in fused ATTN_O_PROJ path (contexts up to 160 tokens stay within its limit).
@pytest.mark.parametrize("policy,fuse", [("dynamic", False), ("lpt", False), ("rr", False), ("lpt", True)])
def test_llama_1b_128_greedy_steps_match_reference(policy: str, fuse: bool) -> None:
    cfg = preset_config("llama-3.2-1b")
    dev = torch.device("cuda")
    weights = random_weights(cfg, torch.bfloat16, dev, seed=0)
    pages = -(-(PROMPT + NEW) // PAGE)
    table = list(range(pages))
    mk = CudaBackend(weights, num_pages=pages, page_size=PAGE, policy=policy, fuse_o_proj=fuse)
    ref = LlamaModel(weights)
    ref_kv = PagedKVCache.allocate(cfg, num_pages=pages, page_size=PAGE, dtype=torch.bfloat16, device=dev)
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT,), generator=torch.Generator().manual_seed(1)).tolist()

    # Prefill: reference in one step, megakernel in chunks it can hold.
    ref_logits = ref.forward(StepBatch.build([prompt], [0], [table], device=dev, page_size=PAGE), ref_kv)[0]
    step = mk.max_tokens_per_step
    for start in range(0, PROMPT, step):
        chunk = prompt[start:start + step]
        mk_logits = mk.forward(StepBatch.build([chunk], [start], [table], device=dev, page_size=PAGE))[0]
    exact, ties, worst_gap, worst_diff = 0, 0, 0.0, 0.0
    tokens: list[int] = []
    for i in range(NEW):
        mk_tok = int(mk_logits.argmax())
        ref_max = float(ref_logits.max())
        gap = ref_max - float(ref_logits[mk_tok])
        worst_diff = max(worst_diff, float((mk_logits - ref_logits.float()).abs().max()))
        if mk_tok == int(ref_logits.argmax()):
            exact += 1
        else:
            ties += 1
            worst_gap = max(worst_gap, gap)
            assert gap <= NEAR_TIE, f"step {i}: megakernel chose {mk_tok}, reference logit {gap:.3f} below max"
        tokens.append(mk_tok)
        pos = PROMPT + i
        batch = StepBatch.build([[mk_tok]], [pos], [table], device=dev, page_size=PAGE)
        mk_logits = mk.forward(batch)[0]
        assert int(mk.last.out_tokens[0]) == int(mk_logits.argmax())  # in-kernel argmax agrees
        ref_logits = ref.forward(batch, ref_kv)[0]
    assert any(type(i).__name__ == "AttnOProj" for i in mk.last.compiled.stream.instrs) == fuse
    print(f"[{policy}{' fused' if fuse else ''}] exact {exact}/{NEW}, near-ties {ties} (worst gap {worst_gap:.3f}), "
          f"max |logit diff| {worst_diff:.3f}")
    # The per-step gap bound above is the criterion; this guards against a systematic drift that stays under
    # it. Random weights give flat logits (near-ties every ~10-20 steps), and batch-1 matvecs round their
    # input to bf16 on the tensor cores (as the reference's bf16 linears do, at other points of the
    # computation): measured 114-125 of 128 exact on an H100 and 110-120 on an H200 (tenth session: the
    # order of the down projections' fp32 atomic adds differs from run to run), every divergence a near-tie
    # within 0.062. 80 % keeps room for that spread and still fails a drift that the gap bound would miss.
    assert exact >= int(0.80 * NEW)
    assert worst_diff < 0.5
