"""The CPU path end to end: `profile --preset tiny --backend vm`, then `--from` re-renders it identically."""
from __future__ import annotations

import json

import pytest

from engine.cli.profile import main
from profiler.record import load_npz
from profiler.render import ARTIFACTS
from profiler.trace import validate_trace

pytest.importorskip("engine.profiling", reason="engine.profiling (the live collector) is not in this build")


def test_vm_profile_then_rerender(tmp_path, capsys):
    live, again = tmp_path / "live", tmp_path / "again"
    assert main(["--preset", "tiny", "--backend", "vm", "--batch", "2", "--steps", "2", "--out", str(live)]) == 0
    assert "SIMULATED" in capsys.readouterr().out
    for name in ARTIFACTS:
        assert (live / name).stat().st_size > 0, name
    rec = load_npz(live / "raw.npz")
    assert rec.simulated and rec.num_instructions > 0 and rec.meta["batch"] == 2
    trace = json.loads((live / "trace.json").read_text())
    assert validate_trace(trace) == []
    # The compiled stream's real waits: every instruction but the embedding has a dependency arrow.
    flows = [e for e in trace["traceEvents"] if e["ph"] == "f"]
    assert len(flows) >= rec.num_instructions - 2  # one embedding per step waits for nothing
    assert '"deps":{' in (live / "gantt.html").read_text()
    assert "dependency waits excluded" in (live / "summary.txt").read_text()
    assert main(["--from", str(live / "raw.npz"), "--out", str(again)]) == 0
    assert (again / "summary.json").read_text() == (live / "summary.json").read_text()


def test_kernel_options_reach_the_vm_timeline(tmp_path, capsys):
    """--kernel-option (as on bench): a SplitParams field changes the stream the VM profiles, and the record says so;
    an unknown option is a one-line error naming the flag."""
    out = tmp_path / "opt"
    assert main(["--preset", "tiny", "--backend", "vm", "--out", str(out), "--kernel-option", "min_pages_per_split=1"]) == 0
    assert "min_pages_per_split=1" in str(load_npz(out / "raw.npz").meta["kernel_options"])
    capsys.readouterr()
    assert main(["--preset", "tiny", "--backend", "vm", "--out", str(tmp_path / "bad"), "--kernel-option", "nope=1"]) == 2
    err = capsys.readouterr().err
    assert "--kernel-option" in err and len(err.strip().splitlines()) == 1
