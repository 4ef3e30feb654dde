"""Open gantt.html in a real headless Chromium: rows must be drawn, and drawing 1e5 spans stays fast."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.image import imread
from synthetic_profiles import make_record

from profiler.colors import opcode_colors
from profiler.html import write_html
from profiler.spans import to_spans

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium not installed (apt-get install -y chromium)")
WIDTH, HEIGHT = 1200, 800


def _chromium(page: Path, *mode: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", *mode, page.as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout


def test_screenshot_has_drawn_rows(tmp_path, rng):
    num_sms = 12
    rec = make_record(rng, n=1500, num_sms=num_sms)
    page = write_html(to_spans(rec), tmp_path / "gantt.html")
    shot = tmp_path / "shot.png"
    _chromium(page, f"--screenshot={shot}")
    img = imread(shot)[..., :3]
    assert img.shape[:2] == (HEIGHT, WIDTH)
    plot = img[120:, 80:]  # below the header, right of the SM labels
    palette = np.array([to_rgb(c) for c in opcode_colors(rec.opcode_names).values()])
    dist = np.abs(plot[:, :, None, :] - palette[None, None]).max(axis=3).min(axis=2)
    drawn = dist < 0.02  # pixel painted in one of the opcode colours
    assert drawn.mean() > 0.05, f"only {drawn.mean():.3f} of the plot area is drawn"
    # Rows: maximal runs of scanlines that contain boxes; every SM band must show up.
    lines = drawn.mean(axis=1) > 0.02
    runs = int(lines[0]) + int(np.count_nonzero(lines[1:] & ~lines[:-1]))
    assert runs >= num_sms, f"{runs} drawn bands for {num_sms} SMs"
    banner = img[5, 5]  # simulated: red banner across the top
    assert banner[0] > 0.6 and banner[1] < 0.35


def test_100k_spans_draw_fast(tmp_path, rng):
    rec = make_record(rng, n=100_000, num_sms=132)
    page = write_html(to_spans(rec), tmp_path / "gantt.html")
    dom = _chromium(page, "--dump-dom")
    assert "100000 instructions on 132 SMs" in dom  # the script ran to the end
    draw_ms = float(re.search(r'data-draw-ms="([0-9.]+)"', dom).group(1))
    assert draw_ms < 1500, f"full-view draw of 1e5 spans took {draw_ms} ms"
