"""LlamaConfig parsing (transformers 4 and 5 layouts), validation errors naming the field, presets."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import transformers

from models.llama.config import ConfigError, LlamaConfig, RopeScaling
from models.llama.presets import PRESETS, preset_config
from models.llama.tokenizer_builder import BOS, llama3_eos_ids, special_token_ids

BASE: dict[str, Any] = {
    "vocab_size": 500, "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 3,
    "num_attention_heads": 6, "rms_norm_eps": 1e-5, "model_type": "llama",
}


def test_defaults_and_derived_sizes() -> None:
    c = LlamaConfig.from_dict(BASE)
    assert (c.num_key_value_heads, c.head_dim, c.gqa_ratio) == (6, 16, 1)
    assert (c.q_size, c.kv_size) == (96, 96)
    assert c.rope_scaling is None and c.rope_theta == 10000.0 and c.eos_token_ids == ()
    c = LlamaConfig.from_dict({**BASE, "num_key_value_heads": 2, "head_dim": 40, "eos_token_id": 7})
    assert (c.gqa_ratio, c.q_size, c.kv_size, c.eos_token_ids) == (3, 240, 80, (7,))


@pytest.mark.parametrize("key", ["rope_type", "type"])
def test_rope_scaling_keys(key: str) -> None:
    d = {**BASE, "rope_theta": 5e5, "rope_scaling": {key: "llama3", "factor": 8, "low_freq_factor": 1,
                                                      "high_freq_factor": 4, "original_max_position_embeddings": 8192}}
    c = LlamaConfig.from_dict(d)
    assert c.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 8192) and c.rope_theta == 5e5
    lin = LlamaConfig.from_dict({**BASE, "rope_scaling": {key: "linear", "factor": 2.0}})
    assert lin.rope_scaling == RopeScaling("linear", 2.0)
    assert LlamaConfig.from_dict({**BASE, "rope_scaling": {key: "default"}}).rope_scaling is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_round_trips_through_our_dict_and_transformers5(name: str) -> None:
    c = preset_config(name)
    assert LlamaConfig.from_dict(c.to_hf_dict()) == c
    # transformers 5 re-serialises with "rope_parameters" (rope_theta folded in).
    hf = transformers.LlamaConfig(**c.to_hf_dict()).to_dict()
    assert LlamaConfig.from_dict(hf) == c


@pytest.mark.parametrize("field,bad", [
    ("vocab_size", 0), ("hidden_size", "big"), ("num_hidden_layers", True), ("num_key_value_heads", 4),
    ("head_dim", 15), ("rope_theta", -1.0), ("rms_norm_eps", 0), ("tie_word_embeddings", "yes"),
    ("attention_bias", True), ("mlp_bias", True), ("hidden_act", "gelu"), ("model_type", "mistral"),
    ("bos_token_id", 500), ("eos_token_id", [1, -2]), ("max_position_embeddings", 0),
])
def test_bad_fields_are_named(field: str, bad: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        LlamaConfig.from_dict({**BASE, field: bad})


@pytest.mark.parametrize("rope,field", [
    ({"rope_type": "yarn", "factor": 2.0}, "rope_type"),
    ({"rope_type": "linear"}, "factor"),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4}, "original_max_position_embeddings"),
    ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4,
      "original_max_position_embeddings": 64}, "high_freq_factor"),
    ({"rope_type": "linear", "factor": -1}, "factor"),
])
def test_bad_rope_scaling_is_named(rope: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        LlamaConfig.from_dict({**BASE, "rope_scaling": rope})


def test_missing_required_field_is_named() -> None:
    d = dict(BASE)
    del d["intermediate_size"]
    with pytest.raises(ConfigError, match="intermediate_size"):
        LlamaConfig.from_dict(d)


def test_from_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        LlamaConfig.from_dir(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        LlamaConfig.from_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**BASE, "head_dim": 8}))
    assert LlamaConfig.from_dir(tmp_path).head_dim == 8
    (tmp_path / "config.json").write_text(json.dumps({**BASE, "mlp_bias": True}))
    with pytest.raises(ConfigError, match="mlp_bias"):
        LlamaConfig.from_dir(tmp_path)


def test_presets() -> None:
    c = preset_config("llama-3.2-1b")
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (128256, 2048, 8192, 16)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.tie_word_embeddings) == (32, 8, 64, True)
    assert c.rope_scaling == RopeScaling("llama3", 32.0, 1.0, 4.0, 8192) and c.rope_theta == 500000.0
    assert (c.bos_token_id, c.eos_token_ids, c.max_position_embeddings) == (128000, (128001, 128008, 128009), 131072)
    assert preset_config("llama-3.2-3b").head_dim == 128 and preset_config("llama-3.2-3b").num_hidden_layers == 28
    c8 = preset_config("llama-3.1-8b")
    assert (c8.hidden_size, c8.intermediate_size, c8.tie_word_embeddings, c8.rope_scaling.factor) == (4096, 14336, False, 8.0)
    with pytest.raises(ConfigError, match="llama-3.2-1b"):
        preset_config("llama-2-7b")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_special_ids_match_the_generated_tokenizer(name: str) -> None:
    c = preset_config(name)
    assert c.bos_token_id == special_token_ids(c.vocab_size)[BOS]
    assert c.eos_token_ids == llama3_eos_ids(c.vocab_size)


@pytest.mark.parametrize("rope", [None, RopeScaling("linear", 2.5)])
def test_transformers5_rope_parameters_layout(rope: RopeScaling | None) -> None:
    c = LlamaConfig.from_dict({**BASE, "rope_theta": 1234.0, "num_key_value_heads": 3})
    c = LlamaConfig(**{**c.__dict__, "rope_scaling": rope})
    hf = transformers.LlamaConfig(**c.to_hf_dict()).to_dict()
    assert "rope_parameters" in hf and hf.get("rope_theta") is None
    assert LlamaConfig.from_dict(hf) == c
    explicit = {**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 77.0}}
    assert LlamaConfig.from_dict(explicit).rope_theta == 77.0
