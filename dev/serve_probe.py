"""What a serving pass cost the server's host side, from outside: snapshots of its processes' CPU time and of its
/metrics before and after a pass, and their difference.
    python -m dev.serve_probe snapshot PID URL > before.json     (PID: the server; its child processes count too)
    python -m dev.serve_probe diff before.json after.json TOKENS
prints the server's CPU time per output token (per process: the front end, an --engine-process child; a thread waiting
for the GPU spins, so the engine's process counts that wait too), and the server's own breakdown of the pass (the
GPU's share of decode-run time spent waiting for the host, the engine's wall seconds per kind of step:
server/bench_server_side.py, which `bench-serve` also prints)."""
from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

from server.bench_server_side import breakdown, parse_counters


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process `pid`, all its threads, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids.extend(int(k) for k in (task / "children").read_text().split())
    return kids


def snapshot(pid: int, url: str) -> dict[str, object]:
    cpu = {str(p): process_cpu_seconds(p) for p in [pid] + _children(pid)}
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as resp:
        counters = parse_counters(resp.read().decode())
    return {"cpu": cpu, "metrics": counters, "wall": time.time()}


def diff(before: dict, after: dict, tokens: int) -> str:
    parts = [f"pid {pid} {(s - before['cpu'].get(pid, 0.0)) / max(tokens, 1) * 1e6:.1f} us/token"
             for pid, s in after["cpu"].items()]
    wall = after.get("wall", 0.0) - before.get("wall", 0.0)
    b = breakdown(before["metrics"], after["metrics"], wall)
    if b is None or not b["step_seconds"]:
        return f"server CPU {', '.join(parts)}; no breakdown counters"
    idle = b["decode_run_idle_pct"]
    steps = ", ".join(f"{k} {b['steps'][k]} steps {s:.2f} s" for k, s in b["step_seconds"].items())
    return (f"server CPU {', '.join(parts)}; decode runs {b['decode_run_device_s']:.2f} device s, idle (waiting for "
            f"the host) {'n/a' if idle is None else f'{idle:.1f} %'}; wall {wall:.2f} s: {steps}")


def main() -> None:
    if sys.argv[1] == "snapshot":
        print(json.dumps(snapshot(int(sys.argv[2]), sys.argv[3])))
    else:
        before, after = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        print(diff(before, after, int(sys.argv[4])))


if __name__ == "__main__":
    main()
