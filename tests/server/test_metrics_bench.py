"""/metrics parses as Prometheus text and counts what was served; bench-serve reports sane numbers."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_testlib import MODEL_NAME, ServerThread
from server.bench_serve import BenchConfig, format_report, make_requests, run_benchmark
from server.cli import register


def _families(url: str) -> dict:
    resp = httpx.get(url + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(resp.text)}


def _value(fams: dict, name: str, sample: str) -> float:
    return sum(s.value for s in fams[name].samples if s.name == sample)


def test_metrics_parse_and_count(server: ServerThread) -> None:
    before = _families(server.url)
    body = {"model": MODEL_NAME, "prompt": [5, 6, 7, 8], "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    assert httpx.post(server.url + "/v1/completions", json=body, timeout=30).status_code == 200
    after = _families(server.url)
    for name in ("megakernel:time_to_first_token_seconds", "megakernel:inter_token_latency_seconds",
                 "megakernel:e2e_request_latency_seconds", "megakernel:num_requests_running",
                 "megakernel:num_requests_waiting", "megakernel:kv_cache_usage_perc",
                 "megakernel:prompt_tokens", "megakernel:generation_tokens"):
        assert name in after, name
    gen = "megakernel:generation_tokens"
    assert _value(after, gen, gen + "_total") - _value(before, gen, gen + "_total") == 6
    pt = "megakernel:prompt_tokens"
    assert _value(after, pt, pt + "_total") - _value(before, pt, pt + "_total") == 4
    ttft = "megakernel:time_to_first_token_seconds"
    assert _value(after, ttft, ttft + "_count") - _value(before, ttft, ttft + "_count") == 1
    itl = "megakernel:inter_token_latency_seconds"
    assert _value(after, itl, itl + "_count") - _value(before, itl, itl + "_count") == 5
    assert 0.0 <= _value(after, "megakernel:kv_cache_usage_perc", "megakernel:kv_cache_usage_perc") <= 1.0


def test_bench_serve_against_server(server: ServerThread) -> None:
    cfg = BenchConfig(base_url=server.url, num_prompts=12, input_len=16, output_len=6, range_ratio=0.5,
                      max_concurrency=4, seed=3)
    assert make_requests(cfg) == make_requests(cfg)  # the mix is fixed by the seed
    s = asyncio.run(run_benchmark(cfg))
    assert s["completed"] == 12 and s["failed"] == 0
    assert s["total_output_tokens"] == sum(r.output_len for r in make_requests(cfg))  # ignore_eos
    assert s["total_input_tokens"] == sum(len(r.prompt) for r in make_requests(cfg))
    assert s["output_throughput"] > 0 and s["request_throughput"] > 0
    for key in ("ttft", "itl", "e2e", "tpot"):
        assert 0 < s[f"median_{key}_ms"] <= s[f"p90_{key}_ms"] <= s[f"p99_{key}_ms"]
    assert s["mean_ttft_ms"] <= s["p99_e2e_ms"]
    json.dumps(s)  # --json output must serialise
    assert "Output token throughput" in format_report(s)
    # the server's own breakdown of the pass, from its /metrics (steps with prompt tokens at least)
    assert s["server"]["steps"]["prefill"] >= 1 and s["server"]["step_seconds"]["prefill"] > 0
    assert "Server side (its /metrics)" in format_report(s)


def test_cli_registers_subcommands() -> None:
    import argparse
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--model", "/x", "--port", "9", "--api-key", "k"])
    assert args.port == 9 and args.api_key == "k" and args.backend == "auto"
    args = parser.parse_args(["bench-serve", "--num-prompts", "3", "--json", "--max-concurrency", "2"])
    assert args.num_prompts == 3 and args.json and args.ignore_eos


def test_bench_serve_sweep_table_json_and_plot(server: ServerThread, tmp_path) -> None:
    """--sweep: one summary per concurrency (each level with at least that many prompts), a table and a PNG."""
    from server.bench_sweep import format_sweep, parse_levels, plot_sweep, run_sweep

    cfg = BenchConfig(base_url=server.url, num_prompts=2, input_len=8, output_len=3, seed=1)
    rows = asyncio.run(run_sweep(cfg, parse_levels("1,3")))
    assert [r["concurrency"] for r in rows] == [1, 3]
    assert [r["completed"] for r in rows] == [2, 3] and all(r["failed"] == 0 for r in rows)
    table = format_sweep(rows)
    assert "TTFT p99" in table and len(table.splitlines()) == 4
    assert "prefill %" in table  # the server's own account of each level (its /metrics)
    no_gpu_runs = table.splitlines()[-1].split()[-2]  # the torch backend runs no decode runs on a device
    assert no_gpu_runs == "-"
    png = plot_sweep(rows, tmp_path / "sweep.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps({"sweep": rows})


@pytest.mark.parametrize("text", ["", "0,8", "1,x"])
def test_sweep_levels_must_be_positive_integers(text: str) -> None:
    from server.bench_sweep import parse_levels

    with pytest.raises(ValueError, match="--sweep"):
        parse_levels(text)


def test_stream_counters_follow_the_engine_cumulative_values() -> None:
    """set_engine_stats turns the engine's cumulative stream-cache values into counter increments; values below the
    last ones (a new engine) count from zero."""
    from server.metrics import ServerMetrics

    m = ServerMetrics("m")

    def values() -> tuple[float, ...]:
        fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
        return tuple(_value(fams, f"megakernel:step_stream_{n}", f"megakernel:step_stream_{n}_total")
                     for n in ("cache_hits", "compiles", "compile_seconds", "hosted", "background_compiles"))

    m.set_engine_stats(1, 0, 0.1, (3, 2, 0.5, 1, 0))
    m.set_engine_stats(1, 0, 0.1, (10, 2, 0.5, 4, 1))
    assert values() == (10, 2, 0.5, 4, 1)
    m.set_engine_stats(1, 0, 0.1, (1, 1, 0.25, 0, 0))  # a new engine
    assert values() == (11, 3, 0.75, 4, 1)
    m.set_engine_stats(1, 0, 0.1)  # no stream stats: the counters stay
    assert values() == (11, 3, 0.75, 4, 1)


def test_preemptions_are_counted() -> None:
    from server.metrics import ServerMetrics

    m = ServerMetrics("m")

    def value() -> float:
        fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
        return _value(fams, "megakernel:num_preemptions", "megakernel:num_preemptions_total")

    m.set_engine_stats(1, 0, 0.5, preemptions=2)
    m.set_engine_stats(1, 0, 0.5, preemptions=5)
    assert value() == 5
    m.set_engine_stats(1, 0, 0.5, preemptions=1)  # counters reset (a new engine, or after the warm-up)
    assert value() == 6


def test_decode_run_counters_follow_the_engine_and_the_probe_reads_them() -> None:
    """The decode-run device and idle seconds become counters the same way; bench-serve's server-side breakdown
    (server/bench_server_side.py) and dev/serve_probe read them."""
    from dev.serve_probe import diff
    from engine.step_times import StepClock
    from server.bench_server_side import breakdown, format_breakdown, parse_counters
    from server.metrics import ServerMetrics

    def clock_after_two_prefills() -> object:
        clock = StepClock()
        for _ in range(2):
            clock.step_begins()
            clock.step_ends("prefill", 128, busy=True)
        return clock.totals()

    m = ServerMetrics("m")
    m.set_engine_stats(1, 0, 0.1, runs=(2.0, 0.5))
    m.set_engine_stats(1, 0, 0.1, runs=(3.0, 0.75))
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    assert _value(fams, "megakernel:decode_run_device_seconds", "megakernel:decode_run_device_seconds_total") == 3.0
    assert _value(fams, "megakernel:decode_run_device_idle_seconds",
                  "megakernel:decode_run_device_idle_seconds_total") == 0.75
    before = {"cpu": {"1": 1.0}, "wall": 10.0, "metrics": parse_counters(m.render().decode())}
    m.set_engine_stats(1, 0, 0.1, runs=(5.0, 1.25), step_times=clock_after_two_prefills())
    after = {"cpu": {"1": 1.5}, "wall": 12.0, "metrics": parse_counters(m.render().decode())}
    text = diff(before, after, 10_000)
    assert "prefill 2 steps" in text
    assert "pid 1 50.0 us/token" in text and "idle (waiting for the host) 25.0 %" in text
    b = breakdown(before["metrics"], after["metrics"], 2.0)
    assert b is not None and b["decode_run_device_s"] == 2.0 and b["steps"]["prefill"] == 2
    assert any("GPU waiting for the host in runs (%):" in line and "25.0" in line for line in format_breakdown(b))
    assert breakdown(None, after["metrics"], 2.0) is None


def test_step_time_counters_move_per_kind() -> None:
    from engine.step_times import StepClock
    from server.metrics import ServerMetrics

    m = ServerMetrics("m")
    clock = StepClock()
    for kind in ("prefill", "run", "run"):
        clock.step_begins()
        clock.step_ends(kind, 3, busy=True)
    m.set_engine_stats(1, 0, 0.1, step_times=clock.totals())
    m.set_engine_stats(1, 0, 0.1, step_times=clock.totals())  # nothing new: nothing moves
    steps = {s.labels["kind"]: s.value for f in text_string_to_metric_families(m.render().decode())
             if f.name == "megakernel:engine_steps" for s in f.samples if s.name.endswith("_total")}
    assert steps == {"prefill": 1, "run": 2, "between": 2}
