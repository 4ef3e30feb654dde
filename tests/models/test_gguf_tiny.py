"""A tiny GGUF the test writes with `gguf`'s writer: converted once into a checkpoint whose tensors are the
original's (Q and K back from llama.cpp's rotary layout) and whose tokenizer encodes the same; the engine on the
.gguf generates what it generates on the original. A GGUF of another architecture, or with a tensor type that
cannot be dequantised, is one clear error naming the file (and the type)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine import LLM, SamplingParams
from models.llama.init_random import init_random_checkpoint
from models.llama.sources import ModelSourceError, resolve_model

from tests.models.gguf_writer import write_gguf


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_random_checkpoint("tiny", tmp_path_factory.mktemp("ck") / "ck", seed=7, dtype="float32",
                                  progress=False)


def test_a_written_gguf_converts_to_the_same_model(original: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    from engine.cuda_build import CACHE_DIR_ENV

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "engine-cache"))  # LLM converts the .gguf into its cache
    gguf_file = write_gguf(original, tmp_path / "tiny.gguf")
    converted = resolve_model(str(gguf_file), tmp_path / "cache")
    want, got = load_file(str(original / "model.safetensors")), load_file(str(converted / "model.safetensors"))
    for name, t in want.items():
        assert torch.equal(got[name], t.to(torch.bfloat16)), name  # bf16 checkpoint, nothing else changed
    text = "hello world, this is a test"
    assert (AutoTokenizer.from_pretrained(str(converted))(text).input_ids
            == AutoTokenizer.from_pretrained(str(original))(text).input_ids)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    a = LLM(str(gguf_file), backend="torch", dtype="bfloat16", progress=False, num_pages=16)
    b = LLM(str(original), backend="torch", dtype="bfloat16", progress=False, num_pages=16)
    assert a.generate(text, params)[0].outputs[0].token_ids == b.generate(text, params)[0].outputs[0].token_ids


def test_a_gguf_of_another_architecture_is_one_line(original: Path, tmp_path: Path) -> None:
    gguf_file = write_gguf(original, tmp_path / "other.gguf", architecture="bert")
    with pytest.raises(ModelSourceError) as err:
        resolve_model(str(gguf_file), tmp_path / "cache")
    assert "other.gguf" in str(err.value) and "\n" not in str(err.value)


def test_a_tensor_type_the_reader_cannot_dequantise_is_named(original: Path, tmp_path: Path) -> None:
    gguf_file = write_gguf(original, tmp_path / "q81.gguf", raw_type="Q8_1")
    with pytest.raises(ModelSourceError) as err:
        resolve_model(str(gguf_file), tmp_path / "cache")
    message = str(err.value)
    assert "q81.gguf" in message and "Q8_1" in message and "\n" not in message
