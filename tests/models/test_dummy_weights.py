"""`load_format="dummy"`: random weights of a checkpoint's config made where they are used, no file read; a
tensor-parallel rank makes only its part, a tensor every rank holds whole is the same on every rank."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from engine.engine_config import EngineConfig
from models.llama.dummy_weights import dummy_tensors
from models.llama.fp8 import Fp8Matrix, Fp8Scheme
from models.llama.init_random import with_tokenizer_ids
from models.llama.presets import preset_config
from models.llama.tensor_parallel import load_megakernel_shard, shard_parts
from models.llama.tokenizer_builder import write_tokenizer
from models.llama.weights import expected_shapes, load_weights

CONFIG = with_tokenizer_ids(preset_config("tiny"))


@pytest.fixture(scope="module")
def config_only(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A checkpoint directory with config.json and a tokenizer and no weights."""
    out = tmp_path_factory.mktemp("config_only")
    (out / "config.json").write_text(json.dumps(CONFIG.to_hf_dict(torch_dtype="float32")))
    write_tokenizer(Path(out), CONFIG.vocab_size, CONFIG.max_position_embeddings)
    return str(out)


def test_every_tensor_is_made_with_its_shape_and_spread() -> None:
    made = dummy_tensors(CONFIG, torch.float32, "cpu")
    assert {n: tuple(t.shape) for n, t in made.items()} == expected_shapes(CONFIG)
    q = made["model.layers.0.self_attn.q_proj.weight"]
    assert abs(q.std().item() - 0.02) < 0.002 and abs(q.mean().item()) < 0.002
    norm = made["model.norm.weight"]
    assert abs(norm.mean().item() - 1.0) < 0.02
    again = dummy_tensors(CONFIG, torch.float32, "cpu")
    assert all(torch.equal(made[n], again[n]) for n in made)  # the same weights every time


def test_a_rank_makes_its_part_and_the_whole_tensors_agree() -> None:
    parts = [shard_parts(CONFIG, r, 2, vocab_parallel=False) for r in range(2)]
    ranks = [dummy_tensors(CONFIG, torch.float32, "cpu", p) for p in parts]
    q = "model.layers.1.self_attn.q_proj.weight"
    assert tuple(ranks[0][q].shape) == (CONFIG.num_attention_heads * CONFIG.head_dim // 2, CONFIG.hidden_size)
    assert not torch.equal(ranks[0][q], ranks[1][q])  # each rank its own random part
    assert torch.equal(ranks[0]["model.embed_tokens.weight"], ranks[1]["model.embed_tokens.weight"])


def test_no_file_is_read_and_fp8_quantises(config_only: str) -> None:
    w = load_weights(config_only, CONFIG, dtype=torch.float32, load_format="dummy", progress=False)
    assert w.layers[0].q_proj.shape == (CONFIG.num_attention_heads * CONFIG.head_dim, CONFIG.hidden_size)
    fp8 = load_weights(config_only, CONFIG, dtype=torch.bfloat16, load_format="dummy", quantize=Fp8Scheme("channel"),
                       quantization_skip=frozenset({"lm_head"}), progress=False)
    assert isinstance(fp8.layers[0].down_proj, Fp8Matrix)
    shard = load_megakernel_shard(config_only, CONFIG, 1, 2, dtype=torch.float32, load_format="dummy", progress=False)
    assert shard.config.num_attention_heads == CONFIG.num_attention_heads // 2
    with pytest.raises(ValueError, match="load_format must be one of"):
        load_weights(config_only, CONFIG, load_format="random")


def test_bad_load_format_is_named_before_anything_loads() -> None:
    with pytest.raises(ValueError, match="load_format must be one of"):
        EngineConfig(model="m", load_format="zeros")


@pytest.mark.parametrize("kw", [{"backend": "torch"}, {"backend": "vm", "tensor_parallel_size": 2}])
def test_the_engine_generates_from_a_config_alone(config_only: str, kw: dict) -> None:
    llm = LLM(config_only, dtype="float32", progress=False, load_format="dummy", **kw)
    try:
        out = llm.generate({"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    finally:
        llm.close()
    assert len(out[0].outputs[0].token_ids) == 4


def test_without_dummy_a_config_alone_is_a_missing_checkpoint(config_only: str) -> None:
    with pytest.raises(Exception, match="safetensors|model.safetensors|weights"):
        LLM(config_only, backend="torch", dtype="float32", progress=False)


def test_unsplittable_dummy_shard_is_refused_naming_the_field() -> None:
    odd = replace(CONFIG, num_key_value_heads=1, num_attention_heads=3, head_dim=64, hidden_size=192)
    with pytest.raises(ValueError, match="num_attention_heads"):
        load_megakernel_shard("/nonexistent", odd, 0, 2, load_format="dummy")
