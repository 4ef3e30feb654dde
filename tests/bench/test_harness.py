"""run_bench end to end on the CPU (tiny preset), with fake engines plugged in; rows and JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from reference_decode import reference_greedy

from engine.bench.baselines import COMPILE_GRAPH, CUDA_GRAPH, EAGER, RunResult
from engine.bench.cli import main as cli_main
from engine.bench.cli import resolve_device_and_preset
from engine.bench.engines import EngineRegistry
from engine.bench.floor import Floor
from engine.bench.harness import BenchConfig, make_rows, run_bench
from engine.bench.report import format_table, to_json_dict, write_json
from models.llama.config import LlamaConfig
from models.llama.weights import LlamaWeights

ENGINE_SPT = 1e-3


def good_engine(weights: LlamaWeights, config: LlamaConfig, prompt: list[int], new: int) -> tuple[list[int], float]:
    assert weights.config is config
    return reference_greedy(weights, prompt, new)[0], ENGINE_SPT


def wrong_engine(weights: LlamaWeights, config: LlamaConfig, prompt: list[int], new: int) -> tuple[list[int], float]:
    tokens = reference_greedy(weights, prompt, new)[0]
    tokens[1] = (tokens[1] + 1) % config.vocab_size
    return tokens, 2 * ENGINE_SPT


def broken_engine(weights: LlamaWeights, config: LlamaConfig, prompt: list[int], new: int) -> tuple[list[int], float]:
    raise RuntimeError("watchdog: instruction 7 stuck")


def test_run_bench_cpu_end_to_end(tmp_path: Path, seed: int) -> None:
    registry = EngineRegistry()
    registry.register("megakernel", good_engine)
    registry.register("wrong", wrong_engine)
    registry.register("broken", broken_engine)
    config = BenchConfig(preset="tiny", prompt_len=6, new_tokens=4, dtype="float32", device="cpu",
                         repeats=1, seed=seed, bandwidth_bytes=1 << 20)
    result = run_bench(config, registry.runners())

    assert [r.name for r in result.rows] == [EAGER, CUDA_GRAPH, COMPILE_GRAPH, "megakernel", "wrong", "broken"]
    assert result.reference == EAGER
    eager = result.row(EAGER)
    assert eager.status == "ok" and len(eager.tokens) == 4 and eager.ms_per_token > 0
    assert eager.speedup_vs_eager == pytest.approx(1.0)
    for name in (CUDA_GRAPH, COMPILE_GRAPH):
        assert result.row(name).status == "skipped" and "CUDA" in result.row(name).reason

    mk = result.row("megakernel")
    assert mk.tokens_match is True and mk.first_mismatch is None
    assert mk.ms_per_token == pytest.approx(ENGINE_SPT * 1e3)
    assert mk.pct_of_floor == pytest.approx(100 * result.floor.seconds_per_token / ENGINE_SPT)
    assert mk.speedup_vs_eager == pytest.approx(eager.ms_per_token / 1e3 / ENGINE_SPT)
    assert mk.speedup_vs_compile_graph is None
    wrong = result.row("wrong")
    assert wrong.tokens_match is False and wrong.first_mismatch == 1
    broken = result.row("broken")
    assert broken.status == "failed" and "instruction 7" in broken.reason

    assert result.floor.bandwidth_gbps == result.bandwidth.gbps > 0
    assert result.floor.weight_bytes > 0 and result.floor.kv_bytes > 0
    table = format_table(result)
    assert "DIFFER @1" in table and "megakernel" in table and "floor" in table
    data = json.loads(write_json(result, tmp_path / "out" / "bench.json").read_text())
    assert data["rows"][3]["name"] == "megakernel" and data["rows"][3]["tokens_match"] is True
    assert data["floor"]["weight_bytes"] == result.floor.weight_bytes
    assert data["config"]["new_tokens"] == 4 and data["device"].startswith("cpu")
    assert data == json.loads(json.dumps(to_json_dict(result)))


def test_a_runner_of_several_timed_windows_lists_them_in_its_row(tmp_path: Path) -> None:
    """A runner may return each timed window's seconds after the one it reports (their median): the row's notes and
    its JSON list them."""
    def windowed(weights: LlamaWeights, config: LlamaConfig, prompt: list[int], new: int):  # noqa: ANN202
        return reference_greedy(weights, prompt, new)[0], ENGINE_SPT, (2 * ENGINE_SPT, ENGINE_SPT, 1.5 * ENGINE_SPT)

    config = BenchConfig(preset="tiny", prompt_len=6, new_tokens=4, dtype="float32", device="cpu", repeats=1,
                         bandwidth_bytes=1 << 20, skip_baselines=frozenset({EAGER, CUDA_GRAPH, COMPILE_GRAPH}),
                         logprob_check=False)
    result = run_bench(config, {"windowed": windowed})
    row = result.row("windowed")
    assert row.ms_per_token == pytest.approx(1.0) and row.notes["timed_windows_ms"] == "2.000, 1.000, 1.500"
    data = json.loads(write_json(result, tmp_path / "bench.json").read_text())
    assert data["rows"][-1]["notes"]["timed_windows_ms"] == "2.000, 1.000, 1.500"


def _ok(name: str, spt: float, tokens: tuple[int, ...]) -> RunResult:
    return RunResult(name, "ok", tokens, spt)


def test_make_rows_reference_and_speedups() -> None:
    floor = Floor(weight_bytes=2_000_000_000, kv_bytes=0.0, bandwidth_gbps=4000.0)  # 0.5 ms
    runs = [RunResult(EAGER, "skipped", reason="skipped by request"),
            _ok(CUDA_GRAPH, 2e-3, (1, 2, 3)), _ok(COMPILE_GRAPH, 1e-3, (1, 2, 4)), _ok("mk", 0.625e-3, (1, 2, 3))]
    rows, ref = make_rows(runs, floor)
    assert ref == CUDA_GRAPH  # eager skipped: the next baseline is the token reference
    by = {r.name: r for r in rows}
    assert by[EAGER].status == "skipped" and by[EAGER].ms_per_token is None
    assert by[COMPILE_GRAPH].tokens_match is False and by[COMPILE_GRAPH].first_mismatch == 2
    assert by["mk"].tokens_match is True
    assert by["mk"].pct_of_floor == pytest.approx(80.0)
    assert by["mk"].speedup_vs_compile_graph == pytest.approx(1.6)
    assert by["mk"].speedup_vs_eager is None
    short, _ = make_rows([_ok(EAGER, 1e-3, (5, 6)), _ok("mk", 1e-3, (5,))], floor)
    assert short[1].tokens_match is False and short[1].first_mismatch == 1


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="batch"):
        run_bench(BenchConfig(preset="tiny", device="cpu", batch=0), {})
    with pytest.raises(ValueError, match="skip_baselines"):
        run_bench(BenchConfig(preset="tiny", device="cpu", skip_baselines=frozenset({"grpah"})), {})
    with pytest.raises(ValueError, match="clash"):
        run_bench(BenchConfig(preset="tiny", device="cpu"), {EAGER: good_engine})
    with pytest.raises(ValueError, match="dtype"):
        run_bench(BenchConfig(preset="tiny", device="cpu", dtype="int8"), {})
    with pytest.raises(ValueError, match="--kernel-option pdl='yes': expected 0 or 1"):
        run_bench(BenchConfig(preset="tiny", device="cpu", kernel_options=("pdl=yes",)), {})


def test_device_and_preset_resolution() -> None:
    assert resolve_device_and_preset("auto", None, has_cuda=True) == ("cuda", "llama-3.2-1b", None)
    dev, preset, note = resolve_device_and_preset("auto", None, has_cuda=False)
    assert (dev, preset) == ("cpu", "tiny") and "no CUDA GPU" in note
    assert resolve_device_and_preset("auto", "llama-3.2-1b", has_cuda=False)[:2] == ("cpu", "llama-3.2-1b")
    assert resolve_device_and_preset("cuda:1", None, has_cuda=True)[:2] == ("cuda:1", "llama-3.2-1b")


def test_cli_cpu_run_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    rc = cli_main(["--device", "cpu", "--prompt-len", "3", "--new-tokens", "2", "--repeats", "1",
                   "--skip", "graph,compile", "--json", str(out), "--engine-module", "no_such_module_xyz"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "eager" in printed and "no_such_module_xyz" in printed
    data = json.loads(out.read_text())
    assert data["config"]["preset"] == "tiny"
    assert [(r["name"], r["status"]) for r in data["rows"]] == [
        ("eager", "ok"), ("cuda_graph", "skipped"), ("compile_graph", "skipped"), ("engine-torch", "ok")]
    assert data["rows"][1]["reason"] == "skipped by request"
    assert data["rows"][3]["tokens_match"] is True  # the engine's torch path through LLM.generate
    assert "needs a GPU" in printed


def test_cli_takes_kernel_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Options reach the result (and its JSON) as given; a wrong one fails before anything is measured."""
    out = tmp_path / "b.json"
    rc = cli_main(["--device", "cpu", "--prompt-len", "3", "--new-tokens", "2", "--repeats", "1",
                   "--skip", "graph,compile", "--json", str(out), "--kernel-option", "pdl=0",
                   "--kernel-option", "fuse_o_proj=1"])
    assert rc == 0 and "kernel options: pdl=0 fuse_o_proj=1" in capsys.readouterr().out
    assert json.loads(out.read_text())["config"]["kernel_options"] == ["pdl=0", "fuse_o_proj=1"]
    with pytest.raises(ValueError, match="unknown option 'fold'"):
        cli_main(["--device", "cpu", "--kernel-option", "fold=1"])
