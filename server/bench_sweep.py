"""`megakernel bench-serve --sweep 1,8,32,128`: the serving benchmark at each concurrency in turn, one table and a
PNG of output throughput and time to first token against concurrency (what a capacity plan reads: where TTFT starts
to climb, and how far throughput still grows).

Each level runs the same seeded request mix (bench_serve.BenchConfig) with max_concurrency = the level and at least
as many prompts as the level, so every level fills its slots at least once. Against this server the table adds, per
level, the GPU's idle share in runs of decode steps and the prefill steps' share of the pass (bench_server_side.py).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from engine.bench.config import positive_ints
from engine.bench.sweep_figure import sweep_figure
from server.bench_serve import BenchConfig, run_benchmark

SWEEP_COLUMNS = (("output_throughput", "out tok/s", "{:.0f}"), ("median_ttft_ms", "TTFT p50", "{:.1f}"),
                 ("p99_ttft_ms", "TTFT p99", "{:.1f}"), ("median_tpot_ms", "TPOT p50", "{:.2f}"),
                 ("p99_tpot_ms", "TPOT p99", "{:.2f}"), ("median_itl_ms", "ITL p50", "{:.2f}"),
                 ("p99_itl_ms", "ITL p99", "{:.2f}"), ("failed", "failed", "{}"))


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32); ValueError (naming --sweep) for anything but positive integers."""
    levels = positive_ints(text)
    if levels is None:
        raise ValueError(f"--sweep {text!r}: expected comma-separated positive integers")
    return levels


async def run_sweep(cfg: BenchConfig, levels: tuple[int, ...]) -> list[dict[str, Any]]:
    """One summary (bench_serve.summarize's) per level, in order, each with its `concurrency`."""
    out = []
    for n in levels:
        level = dataclasses.replace(cfg, max_concurrency=n, num_prompts=max(cfg.num_prompts, n))
        summary = await run_benchmark(level)
        summary["concurrency"] = n
        out.append(summary)
    return out


# From the server's own account of each level (bench_server_side.py), where it gives one: the share of the GPU's time
# in runs of decode steps it waited for the host, and the share of the pass that went to steps with prompt tokens.
SERVER_COLUMNS = (("GPU idle %", lambda b: b["decode_run_idle_pct"]),
                  ("prefill %", lambda b: b["share_of_pass_pct"].get("prefill")))


def format_sweep(rows: list[dict[str, Any]]) -> str:
    head = f"{'concurrency':>11}" + "".join(f"{title:>11}" for _key, title, _fmt in SWEEP_COLUMNS)
    server = any(r.get("server") is not None for r in rows)
    if server:
        head += "".join(f"{title:>11}" for title, _get in SERVER_COLUMNS)
    lines = ["============ Serving Sweep (ms) ============", head]
    for r in rows:
        line = f"{r['concurrency']:>11}" + "".join(f"{fmt.format(r[key]):>11}" for key, _t, fmt in SWEEP_COLUMNS)
        if server:
            values = [get(r["server"]) if r.get("server") is not None else None for _title, get in SERVER_COLUMNS]
            line += "".join(f"{'-' if v is None else f'{v:.1f}':>11}" for v in values)
        lines.append(line)
    return "\n".join(lines)


def plot_sweep(rows: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Output tok/s and TTFT (p50, p99) against concurrency, side by side, as a PNG."""
    xs = [r["concurrency"] for r in rows]
    with sweep_figure(path, xs, 10, title) as (left, right):
        left.plot(xs, [r["output_throughput"] for r in rows], marker="o")
        left.set(xlabel="concurrency", ylabel="output tokens / s", title="throughput")
        right.plot(xs, [r["median_ttft_ms"] for r in rows], marker="o", label="p50")
        right.plot(xs, [r["p99_ttft_ms"] for r in rows], marker="s", label="p99")
        right.set(xlabel="concurrency", ylabel="ms", title="time to first token")
        right.legend()
    return Path(path)
