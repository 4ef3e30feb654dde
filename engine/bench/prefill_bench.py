"""`megakernel bench --prefill-len L [--batch N]`: time to first token of N prompts of L tokens.

Rows, all measured in the same process on the same weights:
- `megakernel` (`engine-torch` without an sm_90 GPU): the product path, `LLM.generate` of the N prompts with
  max_tokens=1 (greedy), wall time from the call to its return (scheduling, the prompt steps, the first token's
  sampling and detokenisation included), after one untimed warm-up that builds the step shapes' streams;
- `torch-prefill`: the same prompts through one compiled PyTorch forward (engine/bench/dense_prefill.py: cuBLAS
  GEMMs, flash scaled_dot_product_attention), device-timed; `torch-prefill-eager`: the same, eager.
Each row's FLOP rate is set against a large `torch.matmul` measured in the same run (the device's achievable
tensor-core rate), and its time against `torch-prefill`'s. Medians of `repeats` timed runs.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.bench.batch_runner import rotations
from engine.bench.config import COMPILE_GRAPH, EAGER, BenchConfig
from engine.bench.dense_prefill import DensePrefill, prefill_flops
from engine.bench.generate_runner import bench_llm, bench_params
from engine.bench.harness import device_name
from engine.bench.model_source import load_bench_weights, parse_dtype
from engine.bench.timing import DeviceTimer, synchronize
from engine.backends import has_sm90_gpu

TORCH_PREFILL, TORCH_PREFILL_EAGER = "torch-prefill", "torch-prefill-eager"
MATMUL_SIZE = {"cuda": 8192, "cpu": 1024}  # square operands of the matmul reference


@dataclass(frozen=True)
class PrefillRow:
    name: str
    status: str  # ok | skipped | failed
    ttft_ms: float | None = None
    prefill_tok_per_s: float | None = None
    tflops: float | None = None
    pct_of_matmul: float | None = None
    speedup_vs_torch: float | None = None  # torch-prefill's time / this row's (above 1: faster)
    reason: str = ""
    notes: dict[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True)
class PrefillResult:
    config: BenchConfig
    model: str
    device_name: str
    torch_version: str
    date: str
    matmul_tflops: float
    flops_per_prefill: float
    rows: tuple[PrefillRow, ...]
    messages: tuple[str, ...] = ()


def measure_matmul_tflops(device: torch.device, dtype: torch.dtype, repeats: int = 5) -> float:
    n = MATMUL_SIZE["cuda" if device.type == "cuda" else "cpu"]
    a = torch.randn((n, n), device=device).to(dtype)
    b = torch.randn((n, n), device=device).to(dtype)
    return 2.0 * n ** 3 / _median_seconds(lambda: torch.matmul(a, b), device, repeats) / 1e12


def _median_seconds(run: Callable[[], object], device: torch.device, repeats: int) -> float:
    run()  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        timer = DeviceTimer(device)
        timer.start()
        run()
        times.append(timer.stop())
    return statistics.median(times)


def _torch_rows(config: BenchConfig, model: DensePrefill, tokens: torch.Tensor,
                progress: Callable[[str], None]) -> dict[str, float | str]:
    """Seconds per prefill of each torch row (or the reason it did not run)."""
    device = tokens.device
    out: dict[str, float | str] = {}
    for name, skip_key in ((TORCH_PREFILL, COMPILE_GRAPH), (TORCH_PREFILL_EAGER, EAGER)):
        if skip_key in config.skipped():
            out[name] = "skipped by request"
            continue
        progress(f"running {name}")
        try:
            with torch.inference_mode():
                if name == TORCH_PREFILL_EAGER:
                    out[name] = _median_seconds(lambda: model(tokens), device, config.repeats)
                    continue
                last: Exception | None = None
                for mode in config.compile_modes:
                    try:
                        fn = torch.compile(model, mode=mode, dynamic=False)
                        out[name] = _median_seconds(lambda: fn(tokens), device, config.repeats)
                        break
                    except Exception as exc:  # noqa: BLE001 - the next mode, then the row fails
                        last = exc
                        torch._dynamo.reset()
                else:
                    raise RuntimeError(f"torch.compile failed in every mode: {last}")
        except Exception as exc:  # noqa: BLE001 - a baseline failing is a result, not a crash
            out[name] = f"failed: {traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]}"
        finally:
            torch._dynamo.reset()
    return out


def _engine_seconds(config: BenchConfig, weights, prompts: list[list[int]], backend: str) -> float:  # noqa: ANN001
    """Median wall seconds of LLM.generate(prompts, max_tokens=1) after one warm-up call."""
    params = bench_params(False, max_tokens=1)
    batch = [{"prompt_token_ids": p} for p in prompts]
    max_len = min(weights.config.max_position_embeddings, config.prefill_len + 2)
    with bench_llm(weights, backend, max_num_seqs=len(prompts), max_model_len=max_len) as llm:
        llm.generate(batch, params)
        times = []
        for _ in range(config.repeats):
            synchronize(weights.device)
            t0 = time.perf_counter()
            outs = llm.generate(batch, params)
            times.append(time.perf_counter() - t0)
            if any(len(o.outputs[0].token_ids) != 1 for o in outs):
                raise RuntimeError("generate did not return one token per prompt")
        return statistics.median(times)


def run_prefill_bench(config: BenchConfig, messages: tuple[str, ...] = (),
                      progress: Callable[[str], None] = lambda _m: None) -> PrefillResult:
    config.validate()
    if config.prefill_len < 1:
        raise ValueError("run_prefill_bench needs prefill_len >= 1")
    device = torch.device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {config.device!r} requested but CUDA is not available")
    dtype = parse_dtype(config.dtype)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    progress(f"measuring a {MATMUL_SIZE['cuda' if device.type == 'cuda' else 'cpu']}^3 matmul on {device_name(device)}")
    matmul = measure_matmul_tflops(device, dtype)
    weights, model_desc = load_bench_weights(config.model_dir, config.preset, dtype, device, config.seed)
    cfg = weights.config
    if config.prefill_len + 2 > cfg.max_position_embeddings:
        raise ValueError(f"prefill_len {config.prefill_len} + 2 exceeds max_position_embeddings "
                         f"{cfg.max_position_embeddings}")
    gen = torch.Generator().manual_seed(config.seed + 1)
    prompt = torch.randint(0, cfg.vocab_size, (config.prefill_len,), generator=gen).tolist()
    prompts = rotations(prompt, config.batch)
    flops = prefill_flops(weights, config.batch, config.prefill_len)

    seconds: dict[str, float | str] = _torch_rows(
        config, DensePrefill(weights), torch.tensor(prompts, dtype=torch.int64, device=device), progress)
    on_gpu = device.type == "cuda" and has_sm90_gpu()
    engine_name, backend = ("megakernel", "cuda") if on_gpu else ("engine-torch", "torch")
    progress(f"running {engine_name} (LLM.generate, max_tokens=1)")
    try:
        seconds[engine_name] = _engine_seconds(config, weights, prompts, backend)
    except Exception as exc:  # noqa: BLE001 - the engine failing is a result
        seconds[engine_name] = f"failed: {traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]}"

    torch_s = seconds.get(TORCH_PREFILL)
    rows = []
    for name in (engine_name, TORCH_PREFILL, TORCH_PREFILL_EAGER):
        s = seconds.get(name)
        if not isinstance(s, float):
            status = "skipped" if s == "skipped by request" else "failed"
            rows.append(PrefillRow(name, status, reason=str(s)))
            continue
        rows.append(PrefillRow(name, "ok", ttft_ms=s * 1e3, prefill_tok_per_s=config.batch * config.prefill_len / s,
                               tflops=flops / s / 1e12, pct_of_matmul=100.0 * flops / s / 1e12 / matmul,
                               speedup_vs_torch=torch_s / s if isinstance(torch_s, float) else None))
    return PrefillResult(config=config, model=model_desc, device_name=device_name(device),
                         torch_version=torch.__version__, date=date, matmul_tflops=matmul, flops_per_prefill=flops,
                         rows=tuple(rows), messages=messages)


def format_prefill_table(result: PrefillResult) -> str:
    c = result.config
    lines = [f"prefill: {c.batch} x {c.prefill_len} tokens, {result.model}, {result.device_name}, "
             f"{result.flops_per_prefill / 1e9:.2f} GFLOP per prefill; matmul reference "
             f"{result.matmul_tflops:.1f} TFLOP/s",
             f"{'row':<22} {'TTFT ms':>10} {'prefill tok/s':>14} {'TFLOP/s':>9} {'% matmul':>9} {'x torch':>8}"]
    for r in result.rows:
        if r.status != "ok":
            lines.append(f"{r.name:<22} {r.status}: {r.reason}")
            continue
        x = f"{r.speedup_vs_torch:.2f}" if r.speedup_vs_torch is not None else "-"
        lines.append(f"{r.name:<22} {r.ttft_ms:>10.2f} {r.prefill_tok_per_s:>14.0f} {r.tflops:>9.2f} "
                     f"{r.pct_of_matmul:>8.1f}% {x:>8}")
    lines += list(result.messages)
    return "\n".join(lines)


def write_prefill_json(result: PrefillResult, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = dataclasses.asdict(result)
    data["config"]["skip_baselines"] = sorted(result.config.skip_baselines)
    out.write_text(json.dumps(data, indent=2))
    return out

