"""`megakernel bench --prefill-len`: the dense PyTorch prefill agrees with the reference model, the bench's rows and
ratios on the CPU (tiny preset; the megakernel row needs a GPU), the JSON, and the flag."""
from __future__ import annotations

import json

import pytest
import torch

from engine.backends.torch_backend import TorchBackend
from engine.bench.config import BenchConfig
from engine.bench.dense_prefill import DensePrefill, prefill_flops
from engine.bench.prefill_bench import (TORCH_PREFILL, TORCH_PREFILL_EAGER, format_prefill_table, run_prefill_bench,
                                        write_prefill_json)
from models.llama.init_random import random_state_dict
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch
from models.llama.weights import weights_from_state_dict


def _weights():
    cfg = preset_config("tiny")
    return weights_from_state_dict(cfg, random_state_dict(cfg, seed=3), torch.float32, torch.device("cpu"))


def test_dense_prefill_gives_the_reference_models_next_tokens() -> None:
    w = _weights()
    tokens = torch.randint(0, w.config.vocab_size, (3, 41), generator=torch.Generator().manual_seed(0))
    ref = TorchBackend(w, num_pages=12, page_size=16, device=torch.device("cpu"))
    batch = StepBatch.build([t.tolist() for t in tokens], [0, 0, 0], [[0, 1, 2], [3, 4, 5], [6, 7, 8]], page_size=16)
    assert DensePrefill(w)(tokens).tolist() == ref.forward(batch).argmax(dim=-1).tolist()


def test_flops_count_the_layers_attention_and_last_token_head() -> None:
    w = _weights()
    one, two = prefill_flops(w, 1, 10), prefill_flops(w, 2, 10)
    assert two == pytest.approx(2 * one)
    assert prefill_flops(w, 1, 20) > 2 * one - 2 * w.lm_head.numel()  # attention grows faster than linear


def test_prefill_bench_rows_on_the_cpu(tmp_path) -> None:
    config = BenchConfig(preset="tiny", device="cpu", batch=2, prefill_len=24, repeats=1,
                         skip_baselines=frozenset({"compile"}))
    result = run_prefill_bench(config)
    rows = {r.name: r for r in result.rows}
    assert rows[TORCH_PREFILL].status == "skipped" and rows[TORCH_PREFILL_EAGER].status == "ok"
    engine = rows["engine-torch"]
    assert engine.status == "ok" and engine.ttft_ms > 0 and engine.speedup_vs_torch is None
    assert engine.prefill_tok_per_s == pytest.approx(2 * 24 / (engine.ttft_ms / 1e3))
    assert result.matmul_tflops > 0 and 0 < rows[TORCH_PREFILL_EAGER].pct_of_matmul
    assert "engine-torch" in format_prefill_table(result)
    data = json.loads(write_prefill_json(result, tmp_path / "p.json").read_text())
    assert data["config"]["prefill_len"] == 24 and len(data["rows"]) == 3


def test_prefill_len_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="prefill_len"):
        BenchConfig(device="cpu", preset="tiny", prefill_len=-1).validate()


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys) -> None:
    from engine.bench.cli import main

    out = tmp_path / "prefill.json"
    assert main(["--prefill-len", "16", "--batch", "2", "--device", "cpu", "--repeats", "1", "--skip", "compile",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "prefill: 2 x 16 tokens" in printed and "engine-torch" in printed
    assert json.loads(out.read_text())["config"]["batch"] == 2
