"""What a serving pass cost the server's host side, from outside: snapshots of its processes' CPU time and of its
/metrics before and after a pass, and their difference per output token.
    python -m dev.serve_probe snapshot PID URL > before.json     (PID: the server; its child processes count too)
    python -m dev.serve_probe diff before.json after.json TOKENS
prints the server's CPU time per output token (per process: the front end, an --engine-process child; a thread waiting
for the GPU spins, so the engine's process counts that wait too), from the decode-run counters the share of the
device's time in runs that it waited for the host (engine/run_times.py), and the wall seconds of the pass
per kind of engine step (engine/step_times.py) against the pass's own wall time."""
from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

_COUNTERS = ("megakernel:decode_run_device_seconds_total", "megakernel:decode_run_device_idle_seconds_total",
             "megakernel:generation_tokens_total")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        kids.extend(int(k) for k in text)
    return kids


_STEP_COUNTERS = ("megakernel:engine_step_seconds_total", "megakernel:engine_steps_total")


def snapshot(pid: int, url: str) -> dict[str, object]:
    cpu = {str(p): _cpu_seconds(p) for p in [pid] + _children(pid)}
    values: dict[str, float] = {}
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in _STEP_COUNTERS and (kind := re.search(r'kind="(\w+)"', line)):
                name = f"{name}:{kind.group(1)}"
            elif name not in _COUNTERS:
                continue
            values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return {"cpu": cpu, "metrics": values, "wall": time.time()}


def diff(before: dict, after: dict, tokens: int) -> str:
    parts = []
    for pid, seconds in after["cpu"].items():
        used = seconds - before["cpu"].get(pid, 0.0)
        parts.append(f"pid {pid} {used / max(tokens, 1) * 1e6:.1f} us/token")
    run = after["metrics"].get(_COUNTERS[0], 0.0) - before["metrics"].get(_COUNTERS[0], 0.0)
    idle = after["metrics"].get(_COUNTERS[1], 0.0) - before["metrics"].get(_COUNTERS[1], 0.0)
    share = f"{idle / run * 100:.1f} %" if run > 0 else "n/a"
    moved = {k: after["metrics"][k] - before["metrics"].get(k, 0.0) for k in after["metrics"]}
    kinds = sorted({k.rsplit(":", 1)[1] for k in moved if k.startswith(_STEP_COUNTERS[0] + ":")})
    steps = ", ".join(f"{kind} {moved.get(f'{_STEP_COUNTERS[1]}:{kind}', 0):.0f} steps "
                      f"{moved[f'{_STEP_COUNTERS[0]}:{kind}']:.2f} s" for kind in kinds)
    wall = after.get("wall", 0.0) - before.get("wall", 0.0)
    return (f"server CPU {', '.join(parts)}; decode runs {run:.2f} device s, idle (waiting for the host) {share}; "
            f"wall {wall:.2f} s: {steps or 'no step counters'}")


def main() -> None:
    if sys.argv[1] == "snapshot":
        print(json.dumps(snapshot(int(sys.argv[2]), sys.argv[3])))
    else:
        before, after = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        print(diff(before, after, int(sys.argv[4])))


if __name__ == "__main__":
    main()
