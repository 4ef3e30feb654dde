"""`megakernel bench --batch 1,8,16,...`: the decode bench at each batch size, one table of every runner against
the batch (its step over its own batch-1 step: the throughput issue's target), JSON and a PNG."""
from __future__ import annotations

import json
from argparse import ArgumentTypeError
from pathlib import Path

import pytest

from engine.bench.batch_sweep import format_sweep, parse_batches, plot_sweep, sweep_rows, write_sweep_json
from engine.bench.harness import BenchConfig, run_bench
from engine.cli.main import main as cli_main


def test_batches_parse_as_one_size_or_a_list() -> None:
    assert parse_batches("8") == (8,) and parse_batches("1, 8,32") == (1, 8, 32)
    for bad in ("", "0", "1,a", "4,4", "-2"):
        with pytest.raises(ArgumentTypeError, match="positive integer|appears twice"):
            parse_batches(bad)


def test_a_sweep_on_the_cpu(tmp_path: Path) -> None:
    results = [run_bench(BenchConfig(preset="tiny", device="cpu", batch=n, new_tokens=3, prompt_len=5, repeats=1,
                                     logprob_check=False)) for n in (1, 3)]
    rows = sweep_rows(results)
    engine = {r["batch"]: r for r in rows if r["runner"] == "engine-torch"}
    assert set(engine) == {1, 3} and engine[1]["x_batch1"] == pytest.approx(1.0)
    assert engine[3]["x_batch1"] == pytest.approx(engine[3]["ms_per_step"] / engine[1]["ms_per_step"])
    assert engine[3]["tok_per_s"] == pytest.approx(3 / (engine[3]["ms_per_step"] / 1e3))
    table = format_sweep(results)
    assert "x batch 1" in table and "engine-torch" in table
    data = json.loads(write_sweep_json(results, tmp_path / "sweep.json").read_text())
    assert len(data["runs"]) == 2 and data["runs"][1]["config"]["batch"] == 3 and data["sweep"] == json.loads(
        json.dumps(rows))
    png = plot_sweep(results, tmp_path / "sweep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_runs_a_sweep_and_refuses_lists_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["bench", "--device", "cpu", "--preset", "tiny", "--prompt-len", "5", "--new-tokens", "2", "--repeats",
            "1", "--no-logprob-check", "--skip", "compile,graph"]
    assert cli_main([*args, "--batch", "1,2", "--json", str(tmp_path / "s.json"),
                     "--plot", str(tmp_path / "s.png")]) == 0
    out = capsys.readouterr().out
    assert "batch sweep" in out and (tmp_path / "s.png").exists()
    assert len(json.loads((tmp_path / "s.json").read_text())["runs"]) == 2
    assert cli_main([*args, "--batch", "2", "--plot", str(tmp_path / "x.png")]) == 2  # --plot needs a list
    assert "--plot" in capsys.readouterr().err
    assert cli_main([*args, "--batch", "1,2", "--prefill-len", "8"]) == 2
    assert "--batch takes a list only" in capsys.readouterr().err
