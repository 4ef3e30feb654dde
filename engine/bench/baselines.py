"""The PyTorch baselines: eager, one CUDA graph per decode step, torch.compile + CUDA graph.

Protocol (shared with the engine runners, see harness.py): batch 1, greedy. The first
prompt_len - 1 prompt tokens are prefilled untimed (step by step through the same decode step,
which keeps a single code path); then `new_tokens` decode steps are timed, the first one feeding the
last prompt token. Each step is one token in, one greedy token out, with the argmax on the device.
seconds/token = timed decode time / new_tokens, device-synchronised. One untimed warm-up run
precedes `repeats` timed runs; the median is reported.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.bench.config import COMPILE_GRAPH, CUDA_GRAPH, EAGER
from engine.bench.static_llama import StaticLlama
from engine.bench.timing import DeviceTimer, synchronize

Step = Callable[[], None]

BASELINES = (EAGER, CUDA_GRAPH, COMPILE_GRAPH)


@dataclass(frozen=True)
class RunResult:
    """Outcome of one runner. status: "ok", "skipped" or "failed" (then `reason` says why)."""

    name: str
    status: str
    tokens: tuple[int, ...] = ()
    seconds_per_token: float | None = None
    reason: str = ""
    runs_seconds_per_token: tuple[float, ...] = ()
    notes: dict[str, float | str] = field(default_factory=dict)


def generate(model: StaticLlama, step: Step, prompt: torch.Tensor, new_tokens: int) -> tuple[list[int], float]:
    """Greedy-generate `new_tokens` after `prompt` (int64 [P], or [B, P] for a model of batch B, on the model's
    device) with `step`; returns (sequence 0's tokens, seconds per timed decode step of the whole batch)."""
    prompt = prompt.reshape(model.batch, -1)
    p = int(prompt.shape[1])
    if p < 1 or new_tokens < 1 or p + new_tokens > model.max_len:
        raise ValueError(f"generate: prompt_len={p}, new_tokens={new_tokens} must be >= 1 and fit "
                         f"max_len={model.max_len}")
    model.reset()
    for i in range(p - 1):  # untimed prefill; each step's own prediction is overwritten
        model.token.copy_(prompt[:, i])
        step()
    model.token.copy_(prompt[:, p - 1])
    timer = DeviceTimer(prompt.device)
    timer.start()
    for _ in range(new_tokens):
        step()  # feeds its own argmax back into model.token on the device
    seconds = timer.stop()
    tokens = model.history[0, p - 1:p - 1 + new_tokens].tolist()
    return tokens, seconds / new_tokens


def timed_runs(name: str, model: StaticLlama, step: Step, prompt: torch.Tensor, new_tokens: int,
               repeats: int, notes: dict[str, float | str] | None = None) -> RunResult:
    """One warm-up run, then `repeats` timed runs; tokens of the first timed run, median time."""
    notes = dict(notes or {})
    generate(model, step, prompt, new_tokens)
    runs: list[float] = []
    tokens: list[int] = []
    for r in range(max(1, repeats)):
        toks, spt = generate(model, step, prompt, new_tokens)
        runs.append(spt)
        if r == 0:
            tokens = toks
        elif toks != tokens:
            notes["nondeterministic"] = f"run {r} tokens differ from run 0"
    return RunResult(name, "ok", tuple(tokens), statistics.median(runs), "", tuple(runs), notes)


def capture_cuda_graph(step: Step, warmup: int = 3) -> Step:
    """Capture one call of `step` into a CUDA graph and return its replay. `step` runs `warmup` times
    first on a side stream (the documented recipe: lazy init, cuBLAS workspaces, compile autotuning)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    return graph.replay


def compile_step(model: StaticLlama, mode: str, backend: str = "inductor") -> Step:
    """torch.compile of the decode step as one graph (fullgraph: a graph break is an error, not a
    silent slowdown). Compilation itself happens on the first call."""
    if backend == "inductor":
        return torch.compile(model.forward, mode=mode, fullgraph=True)
    return torch.compile(model.forward, backend=backend, fullgraph=True)


def _try_sync(device: torch.device) -> None:
    """Drain the device after a failure; a sticky CUDA error surfaces in the next runner instead."""
    try:
        synchronize(device)
    except Exception:  # noqa: BLE001
        pass


def _short_error(e: BaseException) -> str:
    last = traceback.format_exception_only(type(e), e)[-1].strip()
    return last if len(last) <= 400 else last[:400] + "..."


def run_eager(model: StaticLlama, prompt: torch.Tensor, new_tokens: int, repeats: int) -> RunResult:
    return timed_runs(EAGER, model, model.forward, prompt, new_tokens, repeats)


def run_cuda_graph(model: StaticLlama, prompt: torch.Tensor, new_tokens: int, repeats: int) -> RunResult:
    if prompt.device.type != "cuda":
        return RunResult(CUDA_GRAPH, "skipped", reason="CUDA graphs need a CUDA device")
    model.reset()
    replay = capture_cuda_graph(model.forward)
    return timed_runs(CUDA_GRAPH, model, replay, prompt, new_tokens, repeats)


def run_compile_graph(model: StaticLlama, prompt: torch.Tensor, new_tokens: int, repeats: int,
                      modes: tuple[str, ...] = ("max-autotune-no-cudagraphs", "default")) -> RunResult:
    """torch.compile the step, then capture the compiled step in our own CUDA graph. Tries each
    compile mode in turn; every failure is recorded, never raised."""
    if prompt.device.type != "cuda":
        return RunResult(COMPILE_GRAPH, "skipped", reason="CUDA graphs need a CUDA device")
    errors: list[str] = []
    for mode in dict.fromkeys(modes):  # de-duplicated, order kept
        try:
            torch._dynamo.reset()  # a failed attempt must not leave half-compiled state behind
            compiled = compile_step(model, mode)
            model.reset()
            t0 = time.perf_counter()
            compiled()  # compiles (and autotunes) here, outside any capture
            synchronize(prompt.device)
            compile_s = time.perf_counter() - t0
            replay = capture_cuda_graph(compiled)
            result = timed_runs(COMPILE_GRAPH, model, replay, prompt, new_tokens, repeats,
                                {"compile_mode": mode, "compile_seconds": round(compile_s, 1)})
            return dataclasses.replace(result, reason="; ".join(errors))  # earlier modes' failures
        except Exception as e:  # noqa: BLE001 - any compile/capture failure becomes a recorded reason
            errors.append(f"mode {mode!r}: {_short_error(e)}")
            _try_sync(prompt.device)
    return RunResult(COMPILE_GRAPH, "failed", reason="; ".join(errors))


def run_baseline(name: str, model: StaticLlama, prompt: torch.Tensor, new_tokens: int, repeats: int,
                 compile_modes: tuple[str, ...]) -> RunResult:
    """Run one named baseline; an exception becomes a "failed" result naming the error."""
    try:
        with torch.no_grad():
            if name == EAGER:
                return run_eager(model, prompt, new_tokens, repeats)
            if name == CUDA_GRAPH:
                return run_cuda_graph(model, prompt, new_tokens, repeats)
            if name == COMPILE_GRAPH:
                return run_compile_graph(model, prompt, new_tokens, repeats, compile_modes)
    except Exception as e:  # noqa: BLE001 - one broken baseline must not lose the others' numbers
        _try_sync(prompt.device)
        return RunResult(name, "failed", reason=_short_error(e))
    raise ValueError(f"unknown baseline {name!r}; valid: {', '.join(BASELINES)}")
