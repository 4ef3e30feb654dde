"""`megakernel bench --batch N`: the product rows decode N requests together; the batch-1-only baselines are
skipped saying so; a step's time and N give tok/s; the floor counts every sequence's KV."""
from __future__ import annotations

import pytest

from engine.bench.batch_runner import rotations
from engine.bench.floor import decode_floor
from engine.bench.harness import BenchConfig, run_bench
from models.llama.presets import preset_config


def test_rotations_are_distinct_prompts_of_one_length() -> None:
    got = rotations([1, 2, 3, 4], 3)
    assert got == [[1, 2, 3, 4], [2, 3, 4, 1], [3, 4, 1, 2]] and len({tuple(p) for p in got}) == 3


def test_the_floor_reads_the_weights_once_and_every_kv() -> None:
    cfg = preset_config("llama-3.2-1b")
    one, eight = decode_floor(cfg, 2, 32, 128, 4000.0), decode_floor(cfg, 2, 32, 128, 4000.0, batch=8)
    assert eight.weight_bytes == one.weight_bytes and eight.kv_bytes == pytest.approx(8 * one.kv_bytes)


def test_batch_bench_on_the_cpu() -> None:
    result = run_bench(BenchConfig(preset="tiny", device="cpu", batch=3, new_tokens=4, prompt_len=6, repeats=1))
    rows = {r.name: r for r in result.rows}
    assert all(rows[n].status == "skipped" and "batch 1" in rows[n].reason
               for n in ("eager", "cuda_graph", "compile_graph"))
    engine = rows["engine-torch"]
    assert engine.status == "ok" and len(engine.tokens) == 4
    assert engine.tok_per_s == pytest.approx(3 / (engine.ms_per_token / 1e3))
    assert engine.max_logprob_error is not None and engine.max_logprob_error < 0.05
