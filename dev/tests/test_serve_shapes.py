"""dev/serve_shapes.py runs a small serving pattern end to end and reports the shapes it met."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_pattern_reports_its_shapes() -> None:
    out = subprocess.run([sys.executable, "-m", "dev.serve_shapes", "--clients", "2", "--requests", "3",
                          "--output-len", "8", "--stagger", "3", "--max-num-seqs", "4", "--capacity", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True).stdout
    assert "warm-up compiled" in out and "serving (2 clients, 3 requests of 128 in / 8 out, stagger 3)" in out
    assert "LRU of 2 streams, compile after" in out and "compiling the new shapes:" in out
