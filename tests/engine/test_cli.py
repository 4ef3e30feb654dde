"""The `megakernel` CLI: init-random then generate, and clear errors."""
from __future__ import annotations

from pathlib import Path

from engine.cli import main


def test_init_random_then_generate(tmp_path: Path, capsys) -> None:
    out = tmp_path / "ck"
    assert main(["init-random", "--preset", "tiny", "--out", str(out), "--dtype", "float32"]) == 0
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    assert main(["generate", "--model", str(out), "--prompt", "hi", "--max-tokens", "3", "--backend", "torch"]) == 0
    assert "3 tokens" in capsys.readouterr().out


def test_missing_model_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "x"]) == 2
    assert "nope" in capsys.readouterr().err


def test_unknown_preset_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["init-random", "--preset", "gpt-5", "--out", str(tmp_path / "x")]) == 2
    assert "gpt-5" in capsys.readouterr().err
