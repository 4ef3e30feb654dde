"""The tensor-parallel bench's PyTorch baseline (engine/bench/tensor_parallel_baseline.py), on CPUs: two gloo ranks
of the sharded static decoder (O and down all-reduced, the LM head's vocabulary split and gathered) decode the same
greedy tokens as the whole decoder in one process."""
from __future__ import annotations

import pytest
import torch

from engine.bench.baselines import generate
from engine.bench.static_llama import StaticLlama
from engine.bench.config import TP_GRAPH, BenchConfig
from engine.bench.model_source import shape_only_weights
from engine.bench.tensor_parallel_baseline import NAME, run_tensor_parallel_baseline, tensor_parallel_runner
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


def _whole_model_tokens(checkpoint: str, prompt: list[int], n: int) -> list[int]:
    weights = load_weights(checkpoint, LlamaConfig.from_dir(checkpoint), dtype=torch.float32, progress=False)
    model = StaticLlama(weights, len(prompt) + n)
    with torch.no_grad():
        return generate(model, model.forward, torch.tensor(prompt), n)[0]


def test_the_bench_row_decodes_the_bench_weights(tiny_checkpoint: str) -> None:
    """As `megakernel bench --tensor-parallel-size 2` runs it: the bench's weights written out, the ranks reading
    their shards."""
    weights = load_weights(tiny_checkpoint, LlamaConfig.from_dir(tiny_checkpoint), dtype=torch.float32,
                           progress=False)
    prompt = [3, 99, 12, 7]
    tokens, seconds = tensor_parallel_runner(weights, weights.config, prompt, 5, world=2, cuda=False)
    assert seconds > 0 and list(tokens) == _whole_model_tokens(tiny_checkpoint, prompt, 5)


def test_the_bench_row_on_dummy_weights_makes_its_own(tiny_checkpoint: str) -> None:
    config = LlamaConfig.from_dir(tiny_checkpoint)
    tokens, seconds = tensor_parallel_runner(shape_only_weights(config, torch.float32), config, [1, 2, 3], 4, world=2,
                                             cuda=False)
    assert seconds > 0 and len(tokens) == 4 and all(0 <= t < config.vocab_size for t in tokens)


def test_a_rank_past_the_time_limit_fails_the_row_naming_it(tiny_checkpoint: str) -> None:
    with pytest.raises(RuntimeError, match="rank 0 still running after"):
        tensor_parallel_runner(load_weights(tiny_checkpoint, LlamaConfig.from_dir(tiny_checkpoint),
                                            dtype=torch.float32, progress=False),
                               LlamaConfig.from_dir(tiny_checkpoint), [1, 2], 2, world=2, cuda=False, timeout_s=0.01)


def test_skip_names_the_row() -> None:
    assert TP_GRAPH == NAME
    assert BenchConfig(skip_baselines=frozenset({"tp-graph"})).skipped() == {NAME}
