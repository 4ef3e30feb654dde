"""A 32 000-token prompt with llama3 RoPE scaling (the tiny preset's: factor 8 over an original 512 positions, so
every frequency regime is crossed many times) through the engine's torch backend: the logprobs of the tokens it
generates equal transformers' on the same ids."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from models.llama.init_random import init_random_checkpoint
from models.llama.presets import preset_config

pytestmark = pytest.mark.slow

N = 32_000


def test_32k_context_logprobs_equal_transformers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    config = dataclasses.replace(preset_config("tiny"), max_position_embeddings=N + 64)
    ckpt = init_random_checkpoint(config, tmp_path / "ckpt", seed=3, dtype="float32", progress=False)
    prompt = torch.randint(0, 1000, (N,), generator=torch.Generator().manual_seed(0)).tolist()
    llm = LLM(str(ckpt), backend="torch", dtype="float32", progress=False, max_model_len=N + 8, max_num_seqs=1)
    out = llm.generate({"prompt_token_ids": prompt},
                       SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, logprobs=0))[0].outputs[0]
    ref = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():
        logits = ref(torch.tensor([prompt + out.token_ids[:-1]])).logits[0, N - 1:]
    want = torch.log_softmax(logits.double(), dim=-1)
    assert out.token_ids == want.argmax(-1).tolist()
    for step, (tok, lp) in enumerate(zip(out.token_ids, out.logprobs or [])):
        assert abs(lp[tok] - float(want[step, tok])) < 1e-4
