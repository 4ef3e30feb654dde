"""Prometheus metrics for one server instance.

Each `ServerMetrics` owns its own `CollectorRegistry` (never the process-global one), so several
apps (tests start many) can live in one process without "duplicated timeseries" errors. Names
follow vLLM's (`megakernel:` prefix instead of `vllm:`) so existing dashboards map over easily.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from engine.step_times import StepTimes

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Seconds; covers a 1 ms GPU token up to multi-minute CPU requests.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
_ITL_BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05,
                0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0)


def _advance(counters: Sequence[Any], now: Sequence[float], seen: Sequence[float]) -> tuple[Any, ...]:
    """Move each counter by what its engine-side cumulative value gained since `seen` (a value below the last one
    comes from a new engine, counted from zero); returns `now`, the next call's `seen`."""
    for counter, value, last in zip(counters, now, seen):
        delta = value - last if value >= last else value
        if delta > 0:
            counter.inc(delta)
    return tuple(now)


class ServerMetrics:
    def __init__(self, model_name: str, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ["model_name"]
        r = self.registry
        self.ttft = Histogram("megakernel:time_to_first_token_seconds", "Time to first token.",
                              labels, buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.itl = Histogram("megakernel:inter_token_latency_seconds",
                             "Time between consecutive output tokens.", labels,
                             buckets=_ITL_BUCKETS, registry=r).labels(model_name)
        self.e2e = Histogram("megakernel:e2e_request_latency_seconds",
                             "End-to-end request latency (arrival to finish).", labels,
                             buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.prompt_tokens = Counter("megakernel:prompt_tokens", "Prefill tokens processed.",
                                     labels, registry=r).labels(model_name)
        self.generation_tokens = Counter("megakernel:generation_tokens", "Generated tokens.",
                                         labels, registry=r).labels(model_name)
        self._finished = Counter("megakernel:request_success", "Finished requests by reason.",
                                 ["model_name", "finished_reason"], registry=r)
        self.running = Gauge("megakernel:num_requests_running", "Requests in the running batch.",
                             labels, registry=r).labels(model_name)
        self.waiting = Gauge("megakernel:num_requests_waiting", "Requests waiting to be scheduled.",
                             labels, registry=r).labels(model_name)
        self.kv_usage = Gauge("megakernel:kv_cache_usage_perc", "Fraction of KV-cache pages in use (0..1).",
                              labels, registry=r).labels(model_name)
        # The megakernel's per-shape instruction streams: a step whose shape is new is compiled on the engine thread
        # first, pausing every request (warm-up compiles the common shapes before the server reports ready).
        self.stream_hits = Counter("megakernel:step_stream_cache_hits", "Steps whose shape's stream was compiled.",
                                   labels, registry=r).labels(model_name)
        self.stream_compiles = Counter("megakernel:step_stream_compiles", "Step shapes compiled while serving.",
                                       labels, registry=r).labels(model_name)
        self.stream_compile_seconds = Counter("megakernel:step_stream_compile_seconds",
                                              "Engine-thread seconds spent compiling step shapes.", labels,
                                              registry=r).labels(model_name)
        self.stream_hosted = Counter("megakernel:step_stream_hosted", "Steps run padded in the compiled stream of a "
                                     "larger shape while their own shape's is not compiled.", labels,
                                     registry=r).labels(model_name)
        self.stream_background = Counter("megakernel:step_stream_background_compiles", "Step shapes compiled off the "
                                         "engine thread while their steps ran hosted.", labels,
                                         registry=r).labels(model_name)
        self._stream_seen: tuple[float, ...] = (0, 0, 0.0, 0, 0)  # the engine's cumulative values at the last update
        self.preemptions = Counter("megakernel:num_preemptions", "Sequences preempted (recomputed later) because the "
                                   "KV cache ran out of pages.", labels, registry=r).labels(model_name)
        self._preemptions_seen = 0
        # Runs of decode steps (engine/run_times.py): idle / device seconds is the share of the device's time
        # in runs that it waited for the host; well above zero, the host side bounds the decode throughput.
        self.run_device_seconds = Counter("megakernel:decode_run_device_seconds", "Device seconds of the runs of "
                                          "decode steps queued ahead of the host.", labels, registry=r).labels(model_name)
        self.run_idle_seconds = Counter("megakernel:decode_run_device_idle_seconds", "Seconds of those the device had "
                                        "no step queued, waiting for the host.", labels, registry=r).labels(model_name)
        self._runs_seen: tuple[float, ...] = (0.0, 0.0)
        # The engine's host seconds per kind of step (engine/step_times.py: run, decode, prefill, between).
        self._step_seconds = Counter("megakernel:engine_step_seconds", "Engine-thread wall seconds per kind of engine "
                                     "step (run: several decode steps on the device; between: between steps while "
                                     "requests are in flight).", ["model_name", "kind"], registry=r)
        self._step_count = Counter("megakernel:engine_steps", "Engine steps per kind.", ["model_name", "kind"],
                                   registry=r)
        self._steps_seen: dict[str, tuple[float, ...]] = {}
        self._model_name = model_name

    def request_finished(self, reason: str) -> None:
        self._finished.labels(self._model_name, reason).inc()

    def set_engine_stats(self, running: int, waiting: int, kv_usage: float,
                         streams: tuple[int, int, float, int, int] | None = None,
                         preemptions: int | None = None, runs: tuple[float, float] | None = None,
                         step_times: StepTimes | None = None) -> None:
        """`streams`: the engine's cumulative (cache hits, compiles, compile seconds, hosted steps, compiles off the
        engine thread); the counters move by what is new
        since the last call (values below the last ones come from a new engine, counted from zero); `preemptions`
        the engine's cumulative count, the same way; `runs` its cumulative (decode-run device seconds, of which
        idle) and `step_times` its steps and seconds per kind, too."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)
        if streams is not None:
            self._stream_seen = _advance((self.stream_hits, self.stream_compiles, self.stream_compile_seconds,
                                          self.stream_hosted, self.stream_background), streams, self._stream_seen)
        if preemptions is not None:
            self._preemptions_seen = _advance((self.preemptions,), (preemptions,), (self._preemptions_seen,))[0]
        if runs is not None:
            self._runs_seen = _advance((self.run_device_seconds, self.run_idle_seconds), runs, self._runs_seen)
        if step_times is not None:
            for kind, steps in step_times.steps.items():
                if not steps and kind not in self._steps_seen:  # no series for a kind of step that never ran
                    continue
                counters = (self._step_count.labels(self._model_name, kind),
                            self._step_seconds.labels(self._model_name, kind))
                self._steps_seen[kind] = _advance(counters, (steps, step_times.seconds[kind]),
                                                  self._steps_seen.get(kind, (0, 0.0)))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class TokenTimes:
    """One request's token timestamps, for TTFT and inter-token latency."""

    def __init__(self, arrival: float):
        self.arrival = arrival
        self.first_token: float | None = None
        self.last_token: float | None = None

    def observe(self, m: ServerMetrics, n_new: int, now: float) -> None:
        """TTFT and inter-token latency of `n_new` tokens that arrived at `now` (the token counters are the caller's
        to move, once for a whole step's outputs: a counter update costs about a microsecond)."""
        if n_new == 0:
            return
        if self.first_token is None:
            self.first_token = now
            m.ttft.observe(now - self.arrival)
            n_new -= 1
        elif self.last_token is not None:
            for _ in range(n_new):  # several tokens in one step share the interval
                m.itl.observe((now - self.last_token) / n_new)
        self.last_token = now
