"""The `megakernel` CLI: init-random then generate; every bad checkpoint is one line and exit 2 (a traceback
only with --debug); build, --version, --help and the entry-point commands."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.cli import distribution
from engine.cli.main import main
from engine.cuda_build import BuildResult
from models.llama.weights import SINGLE_FILE

COMMANDS = ("init-random", "generate", "demo", "build", "bench", "serve", "bench-serve", "profile")


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


# ---- bad checkpoints: each breaks a copy of the tiny checkpoint in one way ----------------------------------
def _edit_config(**changes: object) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, **changes}))
    return edit


def _edit_tensors(edit_state: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        sd = load_file(str(d / SINGLE_FILE))
        edit_state(sd)
        save_file(sd, str(d / SINGLE_FILE))
    return edit


def _edit_bytes(edit_raw: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        (d / SINGLE_FILE).write_bytes(edit_raw((d / SINGLE_FILE).read_bytes()))
    return edit


def _garble_header(raw: bytes) -> bytes:
    n = int.from_bytes(raw[:8], "little")
    return raw[:8] + b"#" * n + raw[8 + n:]


BAD_CHECKPOINTS = {  # kind -> (how to break it, the file and the field the one line must name)
    "no config": (lambda d: (d / "config.json").unlink(), ("config.json",)),
    "garbled config": (lambda d: (d / "config.json").write_text('{"hidden_size": 25'), ("config.json", "invalid JSON")),
    # Without an explicit head_dim the heads must split hidden_size evenly; with one, any hidden_size is valid.
    "hidden not divisible": (_edit_config(hidden_size=250, head_dim=None), ("config.json", "hidden_size")),
    "hidden vs tensors": (_edit_config(hidden_size=250), (SINGLE_FILE, "model.embed_tokens.weight", "shape")),
    "kv heads not dividing": (_edit_config(num_key_value_heads=3), ("config.json", "num_key_value_heads")),
    "bad header length": (_edit_bytes(lambda raw: (10**9).to_bytes(8, "little") + raw[8:]),
                          (SINGLE_FILE, "header length")),
    "bad header JSON": (_edit_bytes(_garble_header), (SINGLE_FILE, "header is not valid JSON")),
    "truncated data": (_edit_bytes(lambda raw: raw[:-1000]), (SINGLE_FILE, "truncated", "tensor")),
    "missing tensor": (_edit_tensors(lambda sd: sd.pop("model.norm.weight")), (SINGLE_FILE, "model.norm.weight")),
    "wrong shape": (_edit_tensors(lambda sd: sd.update({"model.norm.weight": torch.ones(7)})),
                    (SINGLE_FILE, "model.norm.weight", "shape")),
    "wrong dtype": (_edit_tensors(lambda sd: sd.update({"model.norm.weight": torch.ones(256, dtype=torch.int32)})),
                    (SINGLE_FILE, "model.norm.weight", "dtype I32")),
}


@pytest.mark.parametrize("kind", list(BAD_CHECKPOINTS))
def test_bad_checkpoint_is_one_line_and_exit_2(kind: str, tiny_checkpoint: str, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    breaks, named = BAD_CHECKPOINTS[kind]
    breaks(bad)
    argv = ["generate", "--model", str(bad), "--prompt", "x", "--backend", "torch"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("megakernel generate: error: "), err
    assert "Traceback" not in err and str(bad) in err
    for word in named:
        assert word in err, err
    assert main([*argv, "--debug"]) == 2
    debug_err = capsys.readouterr().err
    assert "Traceback" in debug_err and debug_err.rstrip().endswith(err.rstrip())


# ---- error handling ---------------------------------------------------------------------------------------
def _fake_build_all(results: list[BuildResult], seen: dict) -> Callable[..., list[BuildResult]]:
    def build_all(*, force: bool = False, check_import: bool = True) -> list[BuildResult]:
        seen["force"] = force
        return results
    return build_all


def test_build_prints_each_module_and_passes_force(tmp_path: Path, monkeypatch, capsys) -> None:
    results = [BuildResult("mk_a", tmp_path / "a.so", tmp_path / "a.log", cached=False),
               BuildResult("mk_b", tmp_path / "b.so", tmp_path / "b.log", cached=True)]
    seen: dict = {}
    monkeypatch.setattr("engine.cuda_build.build_all", _fake_build_all(results, seen))
    assert main(["build"]) == 0 and seen["force"] is False
    out = capsys.readouterr().out.splitlines()
    assert out == [f"built mk_a: {tmp_path / 'a.so'}", f"cached mk_b: {tmp_path / 'b.so'}"]
    assert main(["build", "--force"]) == 0 and seen["force"] is True


def test_unexpected_error_is_one_line_with_a_hint(monkeypatch, capsys) -> None:
    def broken(**_: object) -> list[BuildResult]:
        raise TypeError("cannot unpack non-iterable BuildResult object")

    monkeypatch.setattr("engine.cuda_build.build_all", broken)
    assert main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["megakernel build: error: TypeError: cannot unpack non-iterable BuildResult object "
                                "(run with --debug for the traceback)"]
    assert main(["--debug", "build"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_build_failure_is_its_first_line(monkeypatch, capsys) -> None:
    from engine.cuda_build import CudaBuildError

    def failing(**_: object) -> list[BuildResult]:
        raise CudaBuildError("building CUDA module mk failed (exit 1); full compiler log: /x/build.log\nerror: ...")

    monkeypatch.setattr("engine.cuda_build.build_all", failing)
    assert main(["build"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "megakernel build: error: building CUDA module mk failed (exit 1); full compiler log: /x/build.log"]


def test_ctrl_c_exits_130_quietly(monkeypatch, capsys) -> None:
    def interrupted(**_: object) -> list[BuildResult]:
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.cuda_build.build_all", interrupted)
    assert main(["build"]) == 130
    assert capsys.readouterr().err == ""


# ---- --version, --help, entry points ----------------------------------------------------------------------
def test_version(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"megakernel {version('megakernel')}"


def test_help_lists_every_command(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    {command}" in out, command
    assert "left out" not in out


def test_a_plugin_that_fails_to_import_is_a_note(monkeypatch, capsys) -> None:
    plugins = (distribution.CommandPlugin("broken", "no_such_package_for_megakernel.cli:register"),
               *distribution.command_plugins())
    monkeypatch.setattr(distribution, "command_plugins", lambda: plugins)
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "broken (no_such_package_for_megakernel.cli:register): ModuleNotFoundError" in out
    assert "    serve" in out and "    generate" in out


def test_plugins_come_from_pyproject_without_installed_metadata(monkeypatch) -> None:
    monkeypatch.setattr(distribution.metadata, "entry_points", lambda group: [])
    targets = {p.name: p.target for p in distribution.command_plugins()}
    assert targets == {"serve": "server.cli:register", "bench": "engine.bench.cli:register"}


@pytest.mark.parametrize("command", ["generate", "serve", "bench", "profile", "demo"])
def test_help_shows_each_flags_default(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default:" in text
    if command in ("generate", "serve"):
        from engine.engine_config import EngineConfig
        assert "--decode-steps DECODE_STEPS" in text and f"(default: {EngineConfig.decode_steps})" in text
        assert "--backend {auto,torch,vm,cuda} default: auto" in text
