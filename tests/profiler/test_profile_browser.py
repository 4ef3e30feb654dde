"""Open gantt.html in a real headless Chromium: rows must be drawn, and drawing 1e5 spans stays fast."""
from __future__ import annotations

import html
import json
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


# Appended to a copy of the page: drives hover, wheel zoom and drag through real DOM events and
# writes what happened into a DOM attribute (top-level `let`s of the page's script are shared).
_INTERACT = """<script>
const box = cv.getBoundingClientRect(), j = RS[0], lanes = FIRST[1] - FIRST[0];
const tMid = (S[j] + E[j]) / 2, laneH = (smH - 2) / lanes;
const mx = box.left + LABEL_W + (tMid - v0) * plotW / (v1 - v0), my = box.top + AXIS_H + 1 + laneH / 2;
const out = {want: IDX[j], full: v1 - v0};
cv.dispatchEvent(new MouseEvent("mousemove", {clientX: mx, clientY: my, bubbles: true}));
out.tip = tip.textContent; out.tipShown = tip.style.display;
cv.dispatchEvent(new WheelEvent("wheel", {deltaY: -400, clientX: mx, clientY: my, bubbles: true, cancelable: true}));
out.zoomed = v1 - v0; out.zoomV0 = v0;
cv.dispatchEvent(new MouseEvent("mousedown", {clientX: mx, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mousemove", {clientX: mx - 200, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mouseup", {clientX: mx - 200, clientY: my, bubbles: true}));
out.pannedV0 = v0;
document.body.setAttribute("data-result", JSON.stringify(out));
</script></body>"""


def test_hover_zoom_and_pan(tmp_path, rng):
    rec = make_record(rng, n=400, num_sms=4)
    page = write_html(to_spans(rec), tmp_path / "gantt.html")
    page.write_text(page.read_text().replace("</body>", _INTERACT))
    dom = _chromium(page, "--dump-dom")
    raw = re.search(r'data-result="([^"]*)"', dom)
    assert raw, "interaction script did not run"
    out = json.loads(html.unescape(raw.group(1)))
    assert out["tipShown"] == "block" and f"instr #{out['want']}" in out["tip"]
    i = out["want"]
    assert rec.opcode_names[int(rec.words[i, 0])] in out["tip"] and f"layer={rec.words[i, 1]}" in out["tip"]
    assert out["zoomed"] < 0.5 * out["full"]  # wheel up zooms in around the cursor
    assert out["pannedV0"] > out["zoomV0"]  # dragging left moves the view later in time
