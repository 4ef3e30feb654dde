"""`check_checkpoint`: a checkpoint validated from config.json and the safetensors headers alone, with one-line
errors that name the file and the tensor or field."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from models.llama.checkpoint_files import read_header
from models.llama.config import ConfigError, LlamaConfig
from models.llama.init_random import init_random_checkpoint
from models.llama.weights import INDEX_FILE, SINGLE_FILE, WeightLoadError, check_checkpoint, load_weights


def _write_raw(path: Path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def _one_line_naming(exc: pytest.ExceptionInfo, *words: str) -> None:
    text = str(exc.value)
    assert "\n" not in text, text
    for word in words:
        assert word in text, text


def test_good_checkpoints_pass(tiny_checkpoint: str, tmp_path: Path) -> None:
    check_checkpoint(tiny_checkpoint, LlamaConfig.from_dir(tiny_checkpoint))
    sharded = init_random_checkpoint("tiny", tmp_path / "sharded", max_shard_bytes=600_000, progress=False)
    assert (sharded / INDEX_FILE).is_file()
    check_checkpoint(sharded, LlamaConfig.from_dir(sharded))


def test_header_is_read_without_the_data(tiny_checkpoint: str) -> None:
    header = read_header(Path(tiny_checkpoint) / SINGLE_FILE)
    assert header["model.norm.weight"].shape == (256,) and header["model.norm.weight"].dtype == "F32"


@pytest.mark.parametrize("header,data,words", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 12, ("4 bytes after",)),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}}, b"\0" * 16, ("'b' starts at data byte 12",)),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, ("'a'", "needs 12 bytes")),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 5, ("truncated", "'a'")),
    ({"a": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, b"\0" * 8, ("'a'", "shape")),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, ("'a'", "data_offsets")),
    ([1, 2], b"", ("not a JSON object",)),
])
def test_inconsistent_headers_name_the_file_and_tensor(tmp_path: Path, header, data: bytes, words) -> None:
    path = tmp_path / "x.safetensors"
    _write_raw(path, header, data)
    with pytest.raises(WeightLoadError) as exc:
        read_header(path)
    _one_line_naming(exc, str(path), *words)


def test_too_short_file(tmp_path: Path) -> None:
    (tmp_path / SINGLE_FILE).write_bytes(b"\1\2\3")
    with pytest.raises(WeightLoadError) as exc:
        read_header(tmp_path / SINGLE_FILE)
    _one_line_naming(exc, SINGLE_FILE, "3 bytes")


def test_shard_problems(tmp_path: Path) -> None:
    ck = init_random_checkpoint("tiny", tmp_path / "ck", max_shard_bytes=600_000, progress=False)
    config = LlamaConfig.from_dir(ck)
    index = json.loads((ck / INDEX_FILE).read_text())
    first_shard = sorted(set(index["weight_map"].values()))[0]
    other = next(n for n, f in index["weight_map"].items() if f != first_shard)
    moved = {**index, "weight_map": {**index["weight_map"], other: first_shard}}
    (ck / INDEX_FILE).write_text(json.dumps(moved))
    with pytest.raises(WeightLoadError) as exc:
        check_checkpoint(ck, config)
    _one_line_naming(exc, other, first_shard, INDEX_FILE)
    (ck / INDEX_FILE).write_text("{ not json")
    with pytest.raises(WeightLoadError) as exc:
        check_checkpoint(ck, config)
    _one_line_naming(exc, INDEX_FILE, "not a valid safetensors index")


def test_load_weights_checks_every_header_before_reading_data(tiny_checkpoint: str, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    sd = load_file(str(ck / SINGLE_FILE))
    sd["model.layers.1.mlp.down_proj.weight"] = sd["model.layers.1.mlp.down_proj.weight"].half()
    sd["model.norm.weight"] = sd["model.norm.weight"][:-1].clone()
    save_file(sd, str(ck / SINGLE_FILE))
    with pytest.raises(WeightLoadError) as exc:  # F16 is loadable; the short norm is found from the header
        load_weights(ck, LlamaConfig.from_dir(ck), progress=False)
    _one_line_naming(exc, "model.norm.weight", SINGLE_FILE, "(255,)", "(256,)")


@pytest.mark.parametrize("raw,words", [
    (b"\xff\xfe{}", ("config.json", "invalid JSON")),
    (b"[]", ("config.json", "JSON object")),
])
def test_garbled_config(tmp_path: Path, raw: bytes, words) -> None:
    (tmp_path / "config.json").write_bytes(raw)
    with pytest.raises(ConfigError) as exc:
        LlamaConfig.from_dir(tmp_path)
    _one_line_naming(exc, *words)


@pytest.mark.parametrize("changes,field", [
    ({"hidden_size": 250, "head_dim": None}, "head_dim"),  # an explicit head_dim would allow any hidden_size
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
])
def test_inconsistent_heads(tiny_checkpoint: str, tmp_path: Path, changes: dict, field: str) -> None:
    cfg = {**json.loads((Path(tiny_checkpoint) / "config.json").read_text()), **changes}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as exc:
        LlamaConfig.from_dir(tmp_path)
    _one_line_naming(exc, "config.json", f"{field}:")
