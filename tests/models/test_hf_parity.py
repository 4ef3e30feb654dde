"""The reference model against transformers.LlamaForCausalLM (float32, eager attention):
last-token logits after a batched paged prefill, then greedy decode through the paged cache."""
from __future__ import annotations

import pytest
import torch
from llama_testlib import PagedRunner, fresh_seed, hf_model, random_prompts, random_weights, small_config

from models.llama.config import RopeScaling

LLAMA3 = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position_embeddings=64)
LINEAR = RopeScaling("linear", factor=4.0)

CONFIGS = {
    # name: (heads, kv_heads, head_dim, hidden, rope, tied)
    "mha-ratio1-untied-norope": (4, 4, 16, 64, None, False),
    "gqa2-headdim32-tied-linear": (4, 2, 32, 64, LINEAR, True),  # head_dim != hidden / heads
    "gqa4-llama3-untied": (8, 2, 16, 128, LLAMA3, False),
    "gqa8-headdim8-tied-llama3": (16, 2, 8, 64, LLAMA3, True),  # head_dim != hidden / heads
    "mqa-llama3-untied": (4, 1, 16, 64, LLAMA3, False),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_prefill_and_greedy_decode_match_transformers(name: str) -> None:
    heads, kv_heads, head_dim, hidden, rope, tied = CONFIGS[name]
    cfg = small_config(heads=heads, kv_heads=kv_heads, head_dim=head_dim, hidden=hidden, rope=rope, tied=tied)
    g = torch.Generator().manual_seed(fresh_seed())
    weights = random_weights(cfg, seed=int(torch.randint(0, 2**31, (1,), generator=g)))
    hf = hf_model(weights)
    prompts = random_prompts([3, 11, 29, 70], cfg.vocab_size, g)  # 70 > 64: past llama3's original ctx
    n_decode = 5
    runner = PagedRunner(weights, max_len=max(map(len, prompts)) + n_decode, num_seqs=len(prompts), g=g)

    logits = runner.step(dict(enumerate(prompts)))
    with torch.no_grad():
        for s, p in enumerate(prompts):
            ref = hf(torch.tensor([p])).logits[0, -1]
            assert (logits[s] - ref).abs().max() < 1e-4, f"{name}: prefill logits of seq {s}"
            diff = (torch.log_softmax(logits[s], -1) - torch.log_softmax(ref, -1)).abs().max()
            assert diff < 1e-3, f"{name}: log-softmax of seq {s} off by {diff}"

    ours = [[int(t)] for t in logits.argmax(-1)]
    for _ in range(n_decode - 1):
        step = runner.step({s: [ours[s][-1]] for s in range(len(prompts))})
        for s in range(len(prompts)):
            ours[s].append(int(step[s].argmax()))
    with torch.no_grad():
        for s, p in enumerate(prompts):
            out = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                              max_new_tokens=n_decode, do_sample=False, use_cache=True,
                              eos_token_id=None, pad_token_id=0)
            assert out[0, len(p):].tolist() == ours[s], f"{name}: greedy tokens of seq {s}"
