"""`run_bench`: copy bandwidth → floor → PyTorch baselines → engine runners → one table of rows.

Everything is measured in the same process on the same device, because absolute numbers drift
between machines and runs; only the ratios within one run are meaningful.
"""
from __future__ import annotations

import datetime
import gc
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from engine.bench.bandwidth import BandwidthResult, measure_copy_bandwidth
from engine.bench.batch_runner import rotations
from engine.bench.baselines import BASELINES, COMPILE_GRAPH, CUDA_GRAPH, EAGER, RunResult, run_baseline
from engine.bench.config import BenchConfig
from engine.bench.engines import DEFAULT_REGISTRY, SAMPLED_SUFFIX, EngineRunner
from engine.bench.floor import Floor, decode_floor
from engine.bench.logprob_error import logprob_errors
from engine.bench.megakernel_runner import ONE_GPU_ROW, megakernel_runners
from engine.bench.model_source import fits_one_device, load_bench_weights, parse_dtype
from engine.bench.static_llama import StaticLlama
from engine.bench.timing import synchronize
from engine.cuda.backend_options import parse_kernel_options

@dataclass(frozen=True)
class BenchRow:
    name: str
    status: str  # ok | skipped | failed
    ms_per_token: float | None = None
    tok_per_s: float | None = None
    pct_of_floor: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile_graph: float | None = None
    tokens_match: bool | None = None  # against the reference run (None: nothing to compare)
    first_mismatch: int | None = None
    reason: str = ""
    notes: dict[str, float | str] = field(default_factory=dict)
    tokens: tuple[int, ...] = ()
    # max |logprob - fp32 reference| over the row's tokens, teacher-forced (engine/bench/logprob_error.py)
    max_logprob_error: float | None = None
    # greedy rows: the largest gap between the fp32 reference's best logprob and its logprob of the row's token
    # (logprob_error.py logprob_errors' regrets): whether the timed row itself computed the right argmax
    max_greedy_regret: float | None = None


@dataclass(frozen=True)
class BenchResult:
    config: BenchConfig
    model: str
    device_name: str
    torch_version: str
    date: str
    bandwidth: BandwidthResult
    floor: Floor
    reference: str | None  # the baseline whose tokens every other row is compared with
    rows: tuple[BenchRow, ...]
    messages: tuple[str, ...] = ()

    def row(self, name: str) -> BenchRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no row named {name!r}; rows: {', '.join(r.name for r in self.rows)}")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} (no GPU)"


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _summary(r: RunResult) -> str:
    if r.status == "ok" and r.seconds_per_token is not None:
        return f"{r.name}: {r.seconds_per_token * 1e3:.3f} ms/token"
    return f"{r.name}: {r.status}{': ' + r.reason if r.reason else ''}"


def _run_engine(name: str, fn: EngineRunner, weights, prompt: list[int], new_tokens: int) -> RunResult:
    try:
        out = fn(weights, weights.config, list(prompt), new_tokens)
        tokens, spt = tuple(int(t) for t in out[0]), float(out[1])
        windows = tuple(float(s) for s in out[2]) if len(out) > 2 else ()  # type: ignore[misc]
        if not spt > 0:
            return RunResult(name, "failed", tokens, reason=f"non-positive seconds_per_token {spt}")
        notes: dict[str, float | str] = {}
        if len(windows) > 1:  # the row is their median
            notes["timed_windows_ms"] = ", ".join(f"{1e3 * s:.3f}" for s in windows)
        return RunResult(name, "ok", tokens, spt, runs_seconds_per_token=windows, notes=notes)
    except Exception as e:  # noqa: BLE001 - the engine under test failing is a result, not a crash
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        return RunResult(name, "failed", reason=f"engine raised {last[:400]}")


def compare_tokens(tokens: tuple[int, ...], reference: tuple[int, ...]) -> tuple[bool, int | None]:
    """(equal, first differing index); a length difference counts as a mismatch at the shorter end."""
    for i, (a, b) in enumerate(zip(tokens, reference)):
        if a != b:
            return False, i
    if len(tokens) != len(reference):
        return False, min(len(tokens), len(reference))
    return True, None


def make_rows(runs: list[RunResult], floor: Floor, logprob_errors: dict[str, float] | None = None,
              batch: int = 1, greedy_regrets: dict[str, float] | None = None) -> tuple[tuple[BenchRow, ...], str | None]:
    """One row per run; at `batch` > 1 a run's seconds are per decode step of the batch (tok/s = batch / s)."""
    by_name = {r.name: r for r in runs if r.status == "ok"}
    reference = next((b for b in BASELINES if b in by_name), None)
    eager_s = by_name[EAGER].seconds_per_token if EAGER in by_name else None
    compile_s = by_name[COMPILE_GRAPH].seconds_per_token if COMPILE_GRAPH in by_name else None
    rows = []
    for r in runs:
        if r.status != "ok" or r.seconds_per_token is None:
            rows.append(BenchRow(r.name, r.status, reason=r.reason, notes=r.notes, tokens=r.tokens))
            continue
        s = r.seconds_per_token
        match, first = (None, None)
        if reference is not None and r.name != reference and not r.name.endswith(SAMPLED_SUFFIX):
            match, first = compare_tokens(r.tokens, by_name[reference].tokens)
        rows.append(BenchRow(
            name=r.name, status="ok", ms_per_token=s * 1e3, tok_per_s=batch / s,
            pct_of_floor=100.0 * floor.seconds_per_token / s,
            speedup_vs_eager=None if eager_s is None else eager_s / s,
            speedup_vs_compile_graph=None if compile_s is None else compile_s / s,
            tokens_match=match, first_mismatch=first, reason=r.reason, notes=r.notes, tokens=r.tokens,
            max_logprob_error=(logprob_errors or {}).get(r.name),
            max_greedy_regret=(greedy_regrets or {}).get(r.name)))
    return tuple(rows), reference


def _quiet(_msg: str) -> None:
    pass


def run_bench(config: BenchConfig, engines: Mapping[str, EngineRunner] | None = None,
              messages: tuple[str, ...] = (), progress: Callable[[str], None] = _quiet) -> BenchResult:
    """Run the whole benchmark. `engines` defaults to the megakernel rows (on an sm_90 GPU, with
    `config.kernel_options`; elsewhere the engine's torch path) and the runners in engines.DEFAULT_REGISTRY; `progress` receives one line per
    phase (the CLI prints them to stderr, so a run that is killed by a time limit still shows how far it got)."""
    config.validate()
    device = torch.device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {config.device!r} requested but CUDA is not available")
    dummy = config.load_format == "dummy"
    if engines is None:
        engines = dict(megakernel_runners(parse_kernel_options(config.kernel_options), device, config.batch,
                                          config.prompt_lens if config.mixed_lengths() else (),
                                          config.kernel_options, config.quantization,
                                          config.tensor_parallel_size, dummy))
        if config.batch == 1 and not dummy:
            engines.update(DEFAULT_REGISTRY.runners())
        elif DEFAULT_REGISTRY.runners():
            messages = (*messages, "registered engine runners decode batch 1: not run at --batch "
                        f"{config.batch}")
    clash = sorted(set(engines) & set(BASELINES))
    if clash:
        raise ValueError(f"engine runner names {clash} clash with the baselines' names")
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # events, streams and graphs use the current device
    dtype = parse_dtype(config.dtype)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    # Bandwidth first, while the device memory is still empty.
    progress(f"measuring copy bandwidth on {device_name(device)}")
    bandwidth = measure_copy_bandwidth(device, config.bandwidth_bytes)
    progress(f"copy bandwidth {bandwidth.gbps:.0f} GB/s; preparing weights")
    weights, model_desc = load_bench_weights(config.model_dir, config.preset, dtype, device, config.seed,
                                             config.load_format)
    runs: list[RunResult] = []
    for name in sorted(set(engines) & config.skipped()):  # an engine row the --skip names (torch-tp-graph)
        del engines[name]
        runs.append(RunResult(name, "skipped", reason="skipped by request"))
    if dummy and ONE_GPU_ROW in engines and not fits_one_device(weights, device):
        del engines[ONE_GPU_ROW]  # the whole model on one GPU: more than its memory
        runs.append(RunResult(ONE_GPU_ROW, "skipped", reason=f"the whole model ({weights.num_bytes() / 1e9:.0f} GB) "
                                                             "does not fit one GPU"))
    cfg = weights.config
    longest = max(config.lengths())
    if longest + config.new_tokens > cfg.max_position_embeddings:
        raise ValueError(f"prompt_len + new_tokens = {longest + config.new_tokens} exceeds "
                         f"max_position_embeddings={cfg.max_position_embeddings}")
    # one rank's bytes where the megakernel row runs over several GPUs (its share of the layers and of the LM head)
    floor = decode_floor(cfg, weights.embed_tokens.element_size(), config.prompt_len, config.new_tokens,
                         bandwidth.gbps, config.batch, config.prompt_lens, fp8_weights=config.quantization is not None,
                         tp_world=config.tensor_parallel_size)
    gen = torch.Generator().manual_seed(config.seed + 1)
    prompt_ids = torch.randint(0, cfg.vocab_size, (config.prompt_len,), generator=gen).tolist()
    # Sequence 0 decodes the prompt itself; at --batch N the others its rotations (as the engine rows do).
    prompt = torch.tensor(rotations(prompt_ids, config.batch), dtype=torch.int64, device=device)

    skipped = config.skipped()
    model: StaticLlama | None = None  # built on first use: it holds fused copies of the weights
    for name in BASELINES:
        if name in skipped or config.mixed_lengths() or dummy:
            reason = ("skipped by request" if name in skipped else
                      "--load-format dummy: the engines make their own weights" if dummy else
                      "the PyTorch baselines decode equal-length batches")
            runs.append(RunResult(name, "skipped", reason=reason))
            continue
        if model is None:
            # --quantization fp8: the baselines' matrices in e4m3 too, through torch._scaled_mm (fp8_linear.py)
            model = StaticLlama(weights, config.prompt_len + config.new_tokens, config.batch,
                                fp8=config.quantization is not None)
        progress(f"running {name}")
        t0 = time.perf_counter()
        res = run_baseline(name, model, prompt, config.new_tokens, config.repeats, config.compile_modes)
        if res.status == "ok":
            res.notes.setdefault("wall_seconds", round(time.perf_counter() - t0, 1))
            if model.fp8:
                res.notes.setdefault("weights", "fp8 e4m3, torch._scaled_mm with per-token activation scales")
        progress(_summary(res))
        runs.append(res)
        torch._dynamo.reset()  # drop compiled code (and its graphs' memory) before the next runner
        _free_memory(device)
    del model  # the fused weight copies and the KV cache: give the engines the memory
    _free_memory(device)

    for name, fn in engines.items():
        progress(f"running engine {name}")
        runs.append(_run_engine(name, fn, weights, prompt_ids, config.new_tokens))
        progress(_summary(runs[-1]))
        try:
            synchronize(device)
            _free_memory(device)
        except Exception as e:  # noqa: BLE001 - a sticky device error: keep the rows measured so far
            runs[-1] = RunResult(name, "failed", runs[-1].tokens, reason=f"device error after run: {e}")
            break

    errors: dict[str, float] = {}
    regrets: dict[str, float] = {}
    if config.logprob_check and dummy:
        messages = (*messages, "logprob check: not run (--load-format dummy: the bench holds no weights)")
    elif config.logprob_check:
        try:
            errors = logprob_errors(weights, prompt_ids, runs, progress, regrets)
        except Exception as e:  # noqa: BLE001 - the check failing is reported, the timings stand
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            messages = (*messages, f"logprob check failed: {last[:400]}")
    rows, reference = make_rows(runs, floor, errors, config.batch, regrets)
    return BenchResult(config=config, model=model_desc, device_name=device_name(device),
                       torch_version=torch.__version__, date=date, bandwidth=bandwidth, floor=floor,
                       reference=reference, rows=rows, messages=tuple(messages))
