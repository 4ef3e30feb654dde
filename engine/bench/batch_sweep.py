"""`megakernel bench --batch 1,8,16,32,64`: the decode bench at each batch size in turn (each a whole bench run,
baselines and floor measured in that run), then one table and a PNG of every runner's step time and throughput
against the batch.

The table's "x batch 1" column is what the throughput issue's targets read: a runner's decode step at batch N over
its own step at batch 1 (1.0: the N sequences cost no more than one; the weights, read once per step, are the same
bytes at every batch).
"""
from __future__ import annotations

import json
from argparse import ArgumentTypeError
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.bench.config import positive_ints
from engine.bench.harness import BenchResult
from engine.bench.sweep_figure import sweep_figure

SWEEP_RUNNERS_SKIPPED = ("megakernel-kernel-only",)  # a batch-1 loop: at batch N > 1 it has no row


def parse_batches(text: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32) (a single '8' -> (8,)); argparse's type error for anything but distinct positive
    integers (argparse names the flag)."""
    batches = positive_ints(text)
    if batches is None:
        raise ArgumentTypeError(f"{text!r}: expected a positive integer or a comma-separated list of them")
    if len(set(batches)) != len(batches):
        raise ArgumentTypeError(f"{text!r}: a batch size appears twice")
    return batches


def run_batch_sweep(batches: tuple[int, ...], run_one: Callable[[int], BenchResult],
                    progress: Callable[[str], None]) -> list[BenchResult]:
    """One bench result per batch size, in order (run_one(N) runs the whole bench at batch N)."""
    results = []
    for n in batches:
        progress(f"batch sweep: batch {n} ({len(results) + 1} of {len(batches)})")
        results.append(run_one(n))
    return results


def sweep_rows(results: list[BenchResult]) -> list[dict[str, Any]]:
    """One dict per (batch, runner that ran): ms/step, tok/s, % of floor, × its own batch-1 step (where the sweep
    has batch 1), speedup over the same run's compile+graph baseline, and the greedy gap (the run's correctness
    evidence for the batched step itself: harness.BenchRow.max_greedy_regret)."""
    base: dict[str, float] = {}
    for res in results:
        if res.config.batch == 1:
            base = {r.name: r.ms_per_token for r in res.rows if r.status == "ok" and r.ms_per_token}
    out = []
    for res in results:
        for r in res.rows:
            if r.status != "ok" or r.ms_per_token is None or r.name in SWEEP_RUNNERS_SKIPPED:
                continue
            out.append({"batch": res.config.batch, "runner": r.name, "ms_per_step": r.ms_per_token,
                        "tok_per_s": r.tok_per_s, "pct_of_floor": r.pct_of_floor,
                        "x_batch1": r.ms_per_token / base[r.name] if r.name in base else None,
                        "speedup_vs_compile_graph": r.speedup_vs_compile_graph,
                        "floor_ms_per_step": res.floor.seconds_per_token * 1e3,
                        "greedy_gap": r.max_greedy_regret})
    return out


def _cell(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def format_sweep(results: list[BenchResult]) -> str:
    rows = sweep_rows(results)
    head = ["batch", "runner", "ms/step", "tok/s", "% of floor", "x batch 1", "vs compile+graph", "floor ms/step",
            "greedy gap"]
    table = [head] + [[str(r["batch"]), r["runner"], _cell(r["ms_per_step"], ".3f"), _cell(r["tok_per_s"], ".0f"),
                       _cell(r["pct_of_floor"], ".1f", "%"), _cell(r["x_batch1"], ".2f", "x"),
                       _cell(r["speedup_vs_compile_graph"], ".2f", "x"), _cell(r["floor_ms_per_step"], ".3f"),
                       _cell(r["greedy_gap"], ".4f")]
                      for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
             for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    first = results[0] if results else None
    title = (f"============ batch sweep: {first.model}, {first.device_name} ============" if first
             else "============ batch sweep ============")
    return "\n".join([title, *lines])


def write_sweep_json(results: list[BenchResult], path: str | Path) -> Path:
    from engine.bench.report import to_json_dict

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"sweep": sweep_rows(results), "runs": [to_json_dict(r) for r in results]}, indent=1))
    return out


def plot_sweep(results: list[BenchResult], path: str | Path) -> Path:
    """Step time (with the floor) and throughput against the batch, one line per runner, as a PNG."""
    rows = sweep_rows(results)
    batches = sorted({r["batch"] for r in rows} | {res.config.batch for res in results})
    title = f"{results[0].model} on {results[0].device_name}" if results else ""
    with sweep_figure(path, batches, 11, title) as (left, right):
        for name in dict.fromkeys(r["runner"] for r in rows):
            mine = [r for r in rows if r["runner"] == name]
            left.plot([r["batch"] for r in mine], [r["ms_per_step"] for r in mine], marker="o", label=name)
            right.plot([r["batch"] for r in mine], [r["tok_per_s"] for r in mine], marker="o", label=name)
        left.plot([res.config.batch for res in results], [res.floor.seconds_per_token * 1e3 for res in results],
                  linestyle="--", color="gray", label="copy floor")
        left.set(xlabel="batch (sequences decoded together)", ylabel="ms per decode step", title="step time")
        right.set(xlabel="batch (sequences decoded together)", ylabel="output tokens / s", title="throughput")
        for ax in (left, right):
            ax.legend(fontsize=8)
    return Path(path)
