"""GPU smoke test of the bench (run with `pytest -m gpu tests/bench`): every baseline path,
including CUDA-graph capture and torch.compile + graph, on the tiny preset in well under a minute."""
from __future__ import annotations

import pytest
import torch

from engine.bench.bandwidth import measure_copy_bandwidth
from engine.bench.baselines import COMPILE_GRAPH, CUDA_GRAPH, EAGER
from engine.bench.harness import BenchConfig, run_bench
from engine.bench.report import format_table

pytestmark = pytest.mark.gpu


def test_gpu_copy_bandwidth() -> None:
    r = measure_copy_bandwidth("cuda", buffer_bytes=256 << 20, trials=3)
    assert 100 < r.gbps < 20_000  # an H100/H200 copies at ~3-4.3 TB/s


def test_gpu_bench_all_baselines_tiny(seed: int) -> None:
    config = BenchConfig(preset="tiny", prompt_len=5, new_tokens=8, dtype="float32", device="cuda",
                         repeats=1, seed=seed, compile_modes=("default",), bandwidth_bytes=256 << 20)
    result = run_bench(config, {}, progress=print)
    print(format_table(result))
    for name in (EAGER, CUDA_GRAPH, COMPILE_GRAPH):
        row = result.row(name)
        assert row.status == "ok", f"{name}: {row.reason}"
        assert len(row.tokens) == 8 and row.ms_per_token > 0
    # Same kernels replayed from a graph: identical tokens. fp32 keeps compile's reordering far from ties.
    assert result.row(CUDA_GRAPH).tokens_match is True
    assert result.row(COMPILE_GRAPH).tokens_match is True
    torch.cuda.synchronize()
