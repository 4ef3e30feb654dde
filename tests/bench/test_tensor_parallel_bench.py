"""`megakernel bench --tensor-parallel-size N`: batch-1 bf16 decode only, the megakernel's ranks only (sm_90 GPUs), and
its floor one rank's bytes (its share of the layers and of the LM head)."""
from __future__ import annotations

import pytest
import torch

from engine.bench.config import BenchConfig
from engine.bench.floor import weight_params_read_per_token
from engine.bench.megakernel_runner import megakernel_runners
from models.llama.presets import preset_config


@pytest.mark.parametrize("kw", [{"batch": 4}, {"prefill_len": 128}, {"quantization": "fp8"}])
def test_other_benches_are_refused(kw: dict) -> None:
    with pytest.raises(ValueError, match="--tensor-parallel-size benches batch-1 decode"):
        BenchConfig(tensor_parallel_size=2, **kw).validate()


def test_the_ranks_need_gpus() -> None:
    with pytest.raises(ValueError, match="sm_90 GPUs"):
        megakernel_runners({}, torch.device("cpu"), tensor_parallel_size=2)


def test_one_ranks_floor_is_half_the_layers_and_half_the_lm_head() -> None:
    cfg = preset_config("llama-3.1-8b")
    whole, rank = weight_params_read_per_token(cfg), weight_params_read_per_token(cfg, tp_world=2)
    lm_head = cfg.vocab_size * cfg.hidden_size
    norms = (2 * cfg.num_hidden_layers + 1) * cfg.hidden_size
    assert rank == (whole - lm_head - norms) // 2 + lm_head // 2 + norms


@pytest.mark.parametrize("kw", [{"batch": 4}, {"prefill_len": 128}, {"quantization": "fp8"}])
def test_dummy_weights_bench_batch_one_decode(kw: dict) -> None:
    with pytest.raises(ValueError, match="--load-format dummy benches batch-1 decode"):
        BenchConfig(load_format="dummy", **kw).validate()


def test_a_dummy_bench_runs_the_engine_rows_alone() -> None:
    from engine.bench.harness import run_bench

    result = run_bench(BenchConfig(preset="tiny", device="cpu", new_tokens=4, prompt_len=5, repeats=1,
                                   load_format="dummy"))
    rows = {r.name: r for r in result.rows}
    assert rows["engine-torch"].status == "ok"
    assert all(rows[b].status == "skipped" and "dummy" in (rows[b].reason or "") for b in ("eager", "compile_graph"))
    assert any("logprob check: not run" in m for m in result.messages)
    assert "random weights the engine makes" in result.model
