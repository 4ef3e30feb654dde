"""Safetensors loading: single file and sharded, dtype conversion, tying, and errors that name the
tensor and the file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from llama_testlib import fresh_seed, small_config
from safetensors.torch import save_file

from models.llama.init_random import random_state_dict
from models.llama.weights import INDEX_FILE, SINGLE_FILE, WeightLoadError, load_weights, to_state_dict

UNTIED = small_config(tied=False, layers=2)
TIED = small_config(tied=True, layers=2)


def _write_sharded(d: Path, sd: dict[str, torch.Tensor], n: int = 3) -> dict[str, str]:
    names = list(sd)
    weight_map = {}
    for i in range(n):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {k: sd[k].contiguous() for k in names[i::n]}
        save_file(part, str(d / fname))
        weight_map.update({k: fname for k in part})
    (d / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


def test_single_file_round_trip_and_dtype(tmp_path: Path) -> None:
    sd = random_state_dict(UNTIED, fresh_seed())
    save_file(sd, str(tmp_path / SINGLE_FILE))
    w = load_weights(tmp_path, UNTIED, dtype=torch.float32, progress=False)
    for name, t in to_state_dict(w).items():
        assert torch.equal(t, sd[name]), name
    wb = load_weights(tmp_path, UNTIED, dtype=torch.bfloat16, progress=False)
    assert wb.layers[1].down_proj.dtype == torch.bfloat16 and wb.dtype == torch.bfloat16
    assert torch.equal(wb.lm_head, sd["lm_head.weight"].to(torch.bfloat16))


def test_sharded_round_trip(tmp_path: Path) -> None:
    sd = random_state_dict(UNTIED, fresh_seed())
    _write_sharded(tmp_path, sd)
    w = load_weights(tmp_path, UNTIED, dtype=torch.float32, progress=False)
    for name, t in to_state_dict(w).items():
        assert torch.equal(t, sd[name]), name


def test_tied_shares_embedding_and_ignores_stored_lm_head(tmp_path: Path) -> None:
    sd = random_state_dict(TIED, fresh_seed())
    assert "lm_head.weight" not in sd
    save_file(sd, str(tmp_path / SINGLE_FILE))
    w = load_weights(tmp_path, TIED, dtype=torch.float32, progress=False)
    assert w.lm_head is w.embed_tokens
    sd["lm_head.weight"] = torch.randn(TIED.vocab_size, TIED.hidden_size)  # present + tied: ignored
    save_file(sd, str(tmp_path / SINGLE_FILE))
    w = load_weights(tmp_path, TIED, dtype=torch.float32, progress=False)
    assert w.lm_head is w.embed_tokens and torch.equal(w.lm_head, sd["model.embed_tokens.weight"])


def test_missing_dir_and_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        load_weights(tmp_path / "nope", UNTIED, progress=False)
    with pytest.raises(WeightLoadError, match=SINGLE_FILE):
        load_weights(tmp_path, UNTIED, progress=False)
    weight_map = _write_sharded(tmp_path, random_state_dict(UNTIED, fresh_seed()))
    gone = weight_map["model.norm.weight"]
    (tmp_path / gone).unlink()
    with pytest.raises(WeightLoadError, match=gone):
        load_weights(tmp_path, UNTIED, progress=False)


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    sd = random_state_dict(UNTIED, fresh_seed())
    del sd["model.layers.1.mlp.up_proj.weight"]
    save_file(sd, str(tmp_path / SINGLE_FILE))
    with pytest.raises(WeightLoadError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*model\.safetensors"):
        load_weights(tmp_path, UNTIED, progress=False)
    sd = random_state_dict(UNTIED, fresh_seed())
    del sd["lm_head.weight"]  # untied: lm_head is required
    save_file(sd, str(tmp_path / SINGLE_FILE))
    with pytest.raises(WeightLoadError, match="lm_head.weight"):
        load_weights(tmp_path, UNTIED, progress=False)


def test_unexpected_tensor_is_named(tmp_path: Path) -> None:
    sd = random_state_dict(UNTIED, fresh_seed())
    sd["model.layers.2.self_attn.q_proj.weight"] = torch.randn(4, 4)  # a layer the config lacks
    weight_map = _write_sharded(tmp_path, sd)
    fname = weight_map["model.layers.2.self_attn.q_proj.weight"]
    with pytest.raises(WeightLoadError, match=rf"model\.layers\.2\.self_attn\.q_proj\.weight.*{fname}"):
        load_weights(tmp_path, UNTIED, progress=False)


def test_wrong_shape_is_named(tmp_path: Path) -> None:
    sd = random_state_dict(UNTIED, fresh_seed())
    sd["model.layers.0.self_attn.k_proj.weight"] = torch.randn(UNTIED.q_size, UNTIED.hidden_size)
    weight_map = _write_sharded(tmp_path, sd)
    fname = weight_map["model.layers.0.self_attn.k_proj.weight"]
    with pytest.raises(WeightLoadError, match=rf"k_proj\.weight.*{fname}.*shape"):
        load_weights(tmp_path, UNTIED, progress=False)
