"""The bench's `megakernel` row serves its weights through the public API from a checkpoint it writes: that
checkpoint must hold exactly the bench's weights (CPU: the torch backend reads it back)."""
from __future__ import annotations

from pathlib import Path

import torch

from engine import LLM, SamplingParams
from engine.bench.generate_runner import write_checkpoint
from engine.bench.model_source import random_weights
from models.llama.config import LlamaConfig
from models.llama.weights import load_weights, to_state_dict


def test_written_checkpoint_holds_the_bench_weights(tiny_checkpoint: str, tmp_path: Path) -> None:
    cfg = LlamaConfig.from_dir(tiny_checkpoint)
    weights = random_weights(cfg, torch.bfloat16, torch.device("cpu"), seed=7)
    write_checkpoint(weights, tmp_path)
    back = load_weights(str(tmp_path), LlamaConfig.from_dir(tmp_path), dtype=torch.bfloat16,
                        device=torch.device("cpu"), progress=False)
    want, got = to_state_dict(weights), to_state_dict(back)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    llm = LLM(str(tmp_path), backend="torch", dtype="bfloat16", progress=False)
    out = llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 4
