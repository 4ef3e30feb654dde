"""What the server itself says about a `bench-serve` pass: its /metrics counters read before and after, their
difference as the pass's server-side breakdown (engine/step_times.py: the engine's wall seconds per kind of step;
engine/cuda/run_timer.py: the GPU's seconds in runs of decode steps and, of them, waiting for the host). A server
without these counters (another engine, metrics off) leaves the breakdown out."""
from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUN_SECONDS = "megakernel:decode_run_device_seconds"
RUN_IDLE_SECONDS = "megakernel:decode_run_device_idle_seconds"
STEP_SECONDS = "megakernel:engine_step_seconds"
STEPS = "megakernel:engine_steps"


def parse_counters(text: str) -> dict[str, float]:
    """The breakdown's counters from Prometheus text: `name` or `name:kind` (the step counters' kinds) -> value,
    summed over the other labels."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (RUN_SECONDS, RUN_IDLE_SECONDS, STEP_SECONDS, STEPS):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            key = f"{family.name}:{sample.labels['kind']}" if "kind" in sample.labels else family.name
            values[key] = values.get(key, 0.0) + sample.value
    return values


async def read_counters(client: httpx.AsyncClient) -> dict[str, float] | None:
    """The server's counters now, or None where /metrics does not answer with them."""
    try:
        resp = await client.get("/metrics")
        if resp.status_code != 200:
            return None
        values = parse_counters(resp.text)
    except (httpx.HTTPError, ValueError):
        return None
    return values or None


def breakdown(before: dict[str, float] | None, after: dict[str, float] | None, duration_s: float
              ) -> dict[str, Any] | None:
    """The pass's server-side breakdown from two readings, or None without both."""
    if before is None or after is None:
        return None
    moved = {k: v - before.get(k, 0.0) for k, v in after.items()}
    kinds = sorted(k.split(":", 2)[2] for k in moved if k.startswith(STEP_SECONDS + ":"))
    run_s, idle_s = moved.get(RUN_SECONDS, 0.0), moved.get(RUN_IDLE_SECONDS, 0.0)
    return {
        "decode_run_device_s": run_s,
        "decode_run_idle_pct": 100.0 * idle_s / run_s if run_s > 0 else None,
        "step_seconds": {k: moved[f"{STEP_SECONDS}:{k}"] for k in kinds},
        "steps": {k: int(round(moved.get(f"{STEPS}:{k}", 0.0))) for k in kinds},
        "share_of_pass_pct": {k: 100.0 * moved[f"{STEP_SECONDS}:{k}"] / duration_s for k in kinds} if duration_s > 0
        else {},
    }


def format_breakdown(b: dict[str, Any]) -> list[str]:
    """Report lines, in `bench-serve`'s layout."""
    lines = [f"{'-' * 15}Server side (its /metrics){'-' * 15}"]
    idle = b["decode_run_idle_pct"]
    lines.append(f"{'Decode runs on the GPU (s):':<40}{b['decode_run_device_s']:>10.2f}")
    lines.append(f"{'GPU waiting for the host in runs (%):':<40}{'n/a' if idle is None else f'{idle:.1f}':>10}")
    for kind, seconds in b["step_seconds"].items():
        share = b["share_of_pass_pct"].get(kind)
        label = (f"Engine between steps ({b['steps'][kind]}x) (s):" if kind == "between"
                 else f"Engine {kind} steps ({b['steps'][kind]}) (s):")
        lines.append(f"{label:<40}{seconds:>10.2f}" + (f"  {share:.0f} % of the pass" if share is not None else ""))
    return lines
