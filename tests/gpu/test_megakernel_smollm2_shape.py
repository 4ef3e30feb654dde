"""The megakernel on SmolLM2-135M's shape (the demo's real model: hidden 576, 9 query heads over 3 KV heads,
tied embeddings), two layers of random weights: `LLM.generate` on the cuda backend, greedy and sampled, follows
the torch reference teacher-forced on its own tokens."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from models.llama.config import LlamaConfig
from models.llama.init_random import init_random_checkpoint
from models.llama.presets import preset_config
from models.llama.weights import load_weights

from tests.gpu.mk_helpers import follows_reference

pytestmark = pytest.mark.gpu


def test_smollm2_shape_follows_the_reference(tmp_path: Path) -> None:
    config = dataclasses.replace(preset_config("smollm2-135m"), num_hidden_layers=2)
    ckpt = str(init_random_checkpoint(config, tmp_path / "ckpt", seed=5, dtype="bfloat16", progress=False))
    cfg = LlamaConfig.from_dir(ckpt)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in (6, 21)]
    llm = LLM(ckpt, backend="cuda", dtype="bfloat16", progress=False)
    assert llm.engine.backend_name == "cuda"
    params = [SamplingParams(temperature=0, max_tokens=24, ignore_eos=True),
              SamplingParams(temperature=0.8, top_p=0.9, seed=1, max_tokens=24, ignore_eos=True)]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    weights = load_weights(ckpt, cfg, dtype=torch.bfloat16, device=torch.device("cuda"), progress=False)
    greedy = outs[0].outputs[0].token_ids
    assert len(greedy) == 24 and follows_reference(weights, prompts[0], greedy) >= 18
    assert len(outs[1].outputs[0].token_ids) == 24
