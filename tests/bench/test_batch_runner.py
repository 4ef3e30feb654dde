"""`megakernel bench --batch N`: the product rows decode N requests together, the PyTorch baselines N sequences in
one static batch; a step's time and N give tok/s; the floor counts every sequence's KV."""
from __future__ import annotations

import pytest
import torch

from engine.bench.baselines import generate
from engine.bench.batch_runner import rotations
from engine.bench.floor import decode_floor
from engine.bench.harness import BenchConfig, run_bench
from engine.bench.static_llama import StaticLlama
from models.llama.presets import preset_config
from models.llama.weights import LlamaWeights


def test_rotations_are_distinct_prompts_of_one_length() -> None:
    got = rotations([1, 2, 3, 4], 3)
    assert got == [[1, 2, 3, 4], [2, 3, 4, 1], [3, 4, 1, 2]] and len({tuple(p) for p in got}) == 3


def test_the_floor_reads_the_weights_once_and_every_kv() -> None:
    cfg = preset_config("llama-3.2-1b")
    one, eight = decode_floor(cfg, 2, 32, 128, 4000.0), decode_floor(cfg, 2, 32, 128, 4000.0, batch=8)
    assert eight.weight_bytes == one.weight_bytes and eight.kv_bytes == pytest.approx(8 * one.kv_bytes)


def test_batch_bench_on_the_cpu() -> None:
    result = run_bench(BenchConfig(preset="tiny", device="cpu", batch=3, new_tokens=4, prompt_len=6, repeats=1))
    rows = {r.name: r for r in result.rows}
    eager, engine = rows["eager"], rows["engine-torch"]
    assert eager.status == "ok" and engine.status == "ok" and len(engine.tokens) == 4
    assert engine.tok_per_s == pytest.approx(3 / (engine.ms_per_token / 1e3))
    assert engine.tokens_match is not None  # sequence 0's tokens against the batched eager baseline's
    assert engine.max_logprob_error is not None and engine.max_logprob_error < 0.05


@torch.no_grad()
def test_a_batched_static_model_decodes_each_sequence_as_alone(tiny_weights: LlamaWeights) -> None:
    prompts = rotations(torch.randint(0, tiny_weights.config.vocab_size, (7,)).tolist(), 3)
    batched = StaticLlama(tiny_weights, 7 + 5, batch=3)
    generate(batched, batched.forward, torch.tensor(prompts), 5)
    for b, p in enumerate(prompts):
        alone = StaticLlama(tiny_weights, 7 + 5)
        assert batched.history[b, 6:11].tolist() == generate(alone, alone.forward, torch.tensor(p), 5)[0]
