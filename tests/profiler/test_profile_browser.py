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
from synthetic_profiles import make_chain_record, make_record

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


def _run_script(tmp_path: Path, page: Path, script: str) -> dict:
    """Append `script` to a copy of `page`, open it, and return the JSON it left in body[data-result]."""
    driven = tmp_path / ("driven_" + page.name)
    driven.write_text(page.read_text().replace("</body>", f"<script>{script}</script></body>"))
    dom = _chromium(driven, "--dump-dom")
    raw = re.search(r'data-result="([^"]*)"', dom)
    assert raw, "interaction script did not run"
    return json.loads(html.unescape(raw.group(1)))


# Drives hover, wheel zoom, drag and a click through real DOM events; the page exposes window.GANTT for this.
_INTERACT = """
const G = window.GANTT, P = G.PANELS[0], box = P.cv.getBoundingClientRect(), j = P.RS[0];
const g = G.rowGeom(P, 0), tMid = (P.S[j] + P.E[j]) / 2;
const mx = box.left + G.LABEL_W + (tMid - G.view.v0) * G.view.plotW / (G.view.v1 - G.view.v0);
const my = box.top + g.y + g.h / 2;
const out = {want: P.IDX[j], full: G.view.v1 - G.view.v0};
P.cv.dispatchEvent(new MouseEvent("mousemove", {clientX: mx, clientY: my, bubbles: true}));
out.tip = G.tip.textContent; out.tipShown = G.tip.style.display;
P.cv.dispatchEvent(new WheelEvent("wheel", {deltaY: -400, clientX: mx, clientY: my, bubbles: true, cancelable: true}));
out.zoomed = G.view.v1 - G.view.v0; out.zoomV0 = G.view.v0;
P.cv.dispatchEvent(new MouseEvent("mousedown", {clientX: mx, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mousemove", {clientX: mx - 200, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mouseup", {clientX: mx - 200, clientY: my, bubbles: true}));
out.pannedV0 = G.view.v0;
// A long drag the other way: the view stops at the recording's start instead of showing empty time.
P.cv.dispatchEvent(new MouseEvent("mousedown", {clientX: mx, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mousemove", {clientX: mx + 50000, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mouseup", {clientX: mx + 50000, clientY: my, bubbles: true}));
out.clampedV0 = G.view.v0;
P.cv.dispatchEvent(new MouseEvent("mousedown", {clientX: mx, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mousemove", {clientX: mx - 50000, clientY: my, bubbles: true}));
window.dispatchEvent(new MouseEvent("mouseup", {clientX: mx - 50000, clientY: my, bubbles: true}));
out.clampedV1 = G.view.v1; out.end = G.FULL;
document.body.setAttribute("data-result", JSON.stringify(out));
"""


def test_hover_zoom_and_pan(tmp_path, rng):
    rec = make_record(rng, n=400, num_sms=4)
    out = _run_script(tmp_path, write_html(to_spans(rec), tmp_path / "gantt.html"), _INTERACT)
    assert out["tipShown"] == "block" and f"instr #{out['want']}" in out["tip"]
    i = out["want"]
    assert rec.opcode_names[int(rec.words[i, 0])] in out["tip"] and f"layer={rec.words[i, 1]}" in out["tip"]
    assert "waiting" in out["tip"] and "then work" in out["tip"]
    assert out["zoomed"] < 0.5 * out["full"]  # wheel up zooms in around the cursor
    assert out["pannedV0"] > out["zoomV0"]  # dragging left moves the view later in time
    assert out["clampedV0"] == 0 and out["clampedV1"] == out["end"]  # pan never leaves the recording


# Zooms in, clicks the first box of a B (it waits for all A's of its layer), then hides opcode A in the legend.
_CLICK = """
const G = window.GANTT, P = G.PANELS[0], box = P.cv.getBoundingClientRect();
G.view.v0 = 0; G.view.v1 = G.FULL / 4; G.draw();
const j = P.POS[%d], g = G.rowGeom(P, P.ROW[j]);
const x = box.left + G.LABEL_W + ((P.S[j] + P.E[j]) / 2 - G.view.v0) * G.view.plotW / (G.view.v1 - G.view.v0);
const y = box.top + g.y + g.h / 2, out = {};
P.cv.dispatchEvent(new MouseEvent("mousedown", {clientX: x, clientY: y, bubbles: true}));
window.dispatchEvent(new MouseEvent("mouseup", {clientX: x, clientY: y, bubbles: true}));
G.draw();
out.selected = G.view.selected ? P.IDX[G.view.selected.j] : null;
out.arrows = +P.cv.dataset.arrows; out.phases = +P.cv.dataset.phaseSegments;
const axisTop = () => P.axis.getBoundingClientRect().top;
window.scrollTo(0, 400); out.axisTopScrolled = axisTop(); out.scrollY = window.scrollY;
const item = [...document.querySelectorAll("#legend span")].find(s => s.dataset.op === "A");
item.click(); G.draw();
out.hiddenA = P.hidden[P.d.ops.findIndex(o => o.name === "A")]; out.legendOff = item.className;
out.phasesHidden = +P.cv.dataset.phaseSegments;
document.body.setAttribute("data-result", JSON.stringify(out));
"""


def test_click_draws_dependency_arrows_and_phases(tmp_path, rng):
    # 160 SMs: taller than the window, so the page scrolls.
    rec = make_chain_record(rng, layers=8, width_a=24, width_b=2, num_sms=160)
    first_b = int(np.flatnonzero(rec.words[:, 0] == 2)[0])
    out = _run_script(tmp_path, write_html(to_spans(rec), tmp_path / "gantt.html"), _CLICK % first_b)
    assert out["selected"] == first_b
    assert out["arrows"] == 24  # one arrow from each A of its layer
    assert out["phases"] > 0  # zoomed in: the marks are drawn as phases inside the boxes
    assert out["scrollY"] > 0 and abs(out["axisTopScrolled"]) < 1  # the time axis stays pinned on top
    assert out["hiddenA"] == 1 and out["legendOff"] == "off"
    assert out["phasesHidden"] < out["phases"]  # A's boxes (and their phases) are no longer drawn


def test_compare_page_has_two_panels_on_one_time_scale(tmp_path, rng):
    from profiler.compare import write_compare

    a, b = make_chain_record(rng, layers=4), make_chain_record(rng, layers=6)
    write_compare(a, b, "a", "b", tmp_path)
    script = """const G = window.GANTT; document.body.setAttribute("data-result", JSON.stringify(
      {panels: G.PANELS.length, full: G.FULL, spans: G.PANELS.map(P => P.d.makespan),
       widths: G.PANELS.map(P => P.cv.width)}));"""
    out = _run_script(tmp_path, tmp_path / "compare.html", script)
    assert out["panels"] == 2 and out["full"] == max(out["spans"]) and out["widths"][0] == out["widths"][1]
