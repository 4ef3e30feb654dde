"""The tensor-parallel bench's PyTorch baseline (engine/bench/tensor_parallel_baseline.py), on CPUs: two gloo ranks
of the sharded static decoder (O and down all-reduced, the LM head's vocabulary split and gathered) decode the same
greedy tokens as the whole decoder in one process."""
from __future__ import annotations

import pytest
import torch

from engine.bench.baselines import generate
from engine.bench.static_llama import StaticLlama
from engine.bench.tensor_parallel_baseline import NAME, run_tensor_parallel_baseline
from models.llama.config import LlamaConfig
from models.llama.weights import load_weights


def test_two_ranks_decode_the_whole_models_tokens(tiny_checkpoint: str) -> None:
    prompt = [5, 17, 200, 42, 9]
    result = run_tensor_parallel_baseline(tiny_checkpoint, prompt, new_tokens=6, world=2, repeats=1,
                                          dtype="float32", cuda=False)
    assert result.status == "ok", result.reason
    assert result.name == NAME and result.seconds_per_token and result.notes["collectives"] == "gloo"
    weights = load_weights(tiny_checkpoint, LlamaConfig.from_dir(tiny_checkpoint), dtype=torch.float32,
                           progress=False)
    model = StaticLlama(weights, len(prompt) + 6)
    with torch.no_grad():
        want, _ = generate(model, model.forward, torch.tensor(prompt), 6)
    assert list(result.tokens) == want


def test_a_vocabulary_the_ranks_cannot_split_is_refused(tiny_checkpoint: str) -> None:
    with pytest.raises(ValueError, match="num_attention_heads|num_key_value_heads"):
        run_tensor_parallel_baseline(tiny_checkpoint, [1, 2], new_tokens=2, world=3, cuda=False)


def test_a_failing_rank_is_a_failed_row_naming_it(tmp_path) -> None:  # noqa: ANN001
    import json

    from models.llama.presets import preset_config
    (tmp_path / "config.json").write_text(json.dumps(preset_config("tiny").to_hf_dict(torch_dtype="float32")))
    result = run_tensor_parallel_baseline(str(tmp_path), [1, 2], new_tokens=2, world=2, cuda=False)  # no weights
    assert result.status == "failed" and "rank 0 exited" in result.reason
