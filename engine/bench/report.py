"""Rendering a BenchResult: a plain-text table for people, JSON for machines."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from engine.bench.engines import SAMPLED_SUFFIX
from engine.bench.harness import BenchResult, BenchRow

_COLUMNS = ("runner", "ms/token", "tok/s", "% of floor", "vs eager", "vs compile+graph", "tokens",
            "max |dlogprob|", "greedy gap")


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def _match(row: BenchRow) -> str:
    if row.tokens_match is None:
        if row.name.endswith(SAMPLED_SUFFIX):
            return "sampled"
        return "ref" if row.status == "ok" else "-"
    return "match" if row.tokens_match else f"DIFFER @{row.first_mismatch}"


def _cells(row: BenchRow) -> list[str]:
    if row.status != "ok":
        return [row.name, row.status, "-", "-", "-", "-", "-", "-", "-"]
    return [row.name, _fmt(row.ms_per_token, ".3f"), _fmt(row.tok_per_s, ".0f"), _fmt(row.pct_of_floor, ".1f", "%"),
            _fmt(row.speedup_vs_eager, ".2f", "x"), _fmt(row.speedup_vs_compile_graph, ".2f", "x"), _match(row),
            _fmt(row.max_logprob_error, ".4f"), _fmt(row.max_greedy_regret, ".4f")]


def format_table(result: BenchResult) -> str:
    c, f, bw = result.config, result.floor, result.bandwidth
    head = [
        f"megakernel bench  {result.date}",
        f"device: {result.device_name}   torch {result.torch_version}   dtype {c.dtype}",
        f"model: {result.model}   batch {c.batch}, prompt "
        f"{c.prompt_len if not c.prompt_lens else ','.join(map(str, c.prompt_lens))}, {c.new_tokens} new tokens (greedy)",
        f"copy bandwidth: {bw.gbps:.0f} GB/s ({bw.buffer_bytes / 2**20:.0f} MiB buffer, best of {bw.trials})",
        f"floor: {f.bytes_per_token / 1e9:.3f} GB/token (weights {f.weight_bytes / 1e9:.3f} GB + KV "
        f"{f.kv_bytes / 1e6:.2f} MB) / bandwidth = {f.seconds_per_token * 1e3:.3f} ms/token",
        *([f"kernel options: {' '.join(c.kernel_options)}"] if c.kernel_options else []),
        "",
    ]
    floor_row = ["floor", f"{f.seconds_per_token * 1e3:.3f}", f"{1 / f.seconds_per_token:.0f}", "100.0%", "", "", "",
                 "", ""]
    columns = list(_COLUMNS)
    if c.batch > 1:  # each row's time is one decode step of the whole batch
        columns[1] = "ms/step"
    floor_row[2] = f"{c.batch / f.seconds_per_token:.0f}"
    table = [columns, floor_row] + [_cells(r) for r in result.rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {r.name}: {r.status}{': ' + r.reason if r.reason else ''}"
             + (f" {r.notes}" if r.notes else "") for r in result.rows if r.reason or r.notes]
    tail = (["", "notes:", *notes] if notes else []) + [f"  {m}" for m in result.messages]
    return "\n".join(head + lines + tail)


def to_json_dict(result: BenchResult) -> dict[str, Any]:
    cfg = dataclasses.asdict(result.config)
    cfg["skip_baselines"] = sorted(result.config.skip_baselines)
    return {
        "date": result.date,
        "device": result.device_name,
        "torch_version": result.torch_version,
        "model": result.model,
        "config": cfg,
        "bandwidth": result.bandwidth.to_dict(),
        "floor": result.floor.to_dict(),
        "reference": result.reference,
        "rows": [dataclasses.asdict(r) for r in result.rows],
        "messages": list(result.messages),
    }


def write_json(result: BenchResult, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(to_json_dict(result), indent=2))
    return out
