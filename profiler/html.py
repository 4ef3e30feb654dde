"""Spans -> gantt.html: one self-contained file (canvas Gantt, no CDN, no network).

A page holds one panel per profile (`megakernel profile --compare` puts two on one time scale). The page's
script is gantt_model.js (decoding, dependencies, text), gantt_page.js (legend, panels) and gantt_view.js
(drawing, zoom / pan, clicks), inlined with the data (profiler/gantt_data.py) into gantt_template.html.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from profiler.gantt_data import gantt_data
from profiler.spans import Spans

PLACEHOLDER = "/*__PROFILE_DATA__*/"
SCRIPT_PLACEHOLDER = "/*__GANTT_SCRIPT__*/"
SCRIPTS = ("gantt_model.js", "gantt_page.js", "gantt_view.js")


def _read(name: str) -> str:
    return resources.files("profiler").joinpath(name).read_text(encoding="utf-8")


def render_panels(panels: list[tuple[str, Spans]], title: str | None = None) -> str:
    """A page of (label, spans) panels sharing one time axis (each panel's times from its own first start)."""
    data = {"panels": [gantt_data(spans, label) for label, spans in panels]}
    data["title"] = title or data["panels"][0]["title"]
    # "</" inside the JSON would end the <script> block early; "<\/" is the same JSON string.
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    script = "\n".join(_read(name) for name in SCRIPTS)
    # Script first: the data may contain the script placeholder's text, never the other way round.
    return _read("gantt_template.html").replace(SCRIPT_PLACEHOLDER, script).replace(PLACEHOLDER, payload)


def render_html(spans: Spans) -> str:
    return render_panels([("", spans)])


def write_html(spans: Spans, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render_html(spans), encoding="utf-8")
    return path
