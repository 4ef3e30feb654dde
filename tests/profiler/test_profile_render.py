from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
from matplotlib.image import imread
from synthetic_profiles import make_record

from engine.cli.profile import main
from profiler.record import ProfileRecord, load_npz
from profiler.render import ARTIFACTS, render_all
from profiler.trace import validate_trace


def test_render_all_writes_every_artifact(tmp_path, rng):
    rec = make_record(rng, n=400, num_sms=6)
    summary = render_all(rec, tmp_path)
    for name in ARTIFACTS:
        assert (tmp_path / name).stat().st_size > 0, name
    assert validate_trace(json.loads((tmp_path / "trace.json").read_text())) == []
    assert np.array_equal(load_npz(tmp_path / "raw.npz").start_ns, rec.start_ns)
    img = imread(tmp_path / "gantt.png")
    assert img.shape[0] > 200 and img.shape[1] > 1000
    assert (img[..., :3].std(axis=2) > 0.05).mean() > 0.02  # coloured boxes, not a blank figure
    assert (tmp_path / "summary.txt").read_text() == summary.text()


def test_html_is_self_contained(tmp_path, rng):
    rec = make_record(rng, n=300)
    rec = replace(rec, opcode_names={**rec.opcode_names, 1: "</script><b>x"})
    render_all(rec, tmp_path)
    html = (tmp_path / "gantt.html").read_text()
    assert not re.search(r"https?://", html)
    assert not re.search(r"<(link|img|iframe)\b|\bsrc\s*=", html, re.I)
    assert html.count("</script>") == 2  # a hostile opcode name cannot close the data block
    assert "SIMULATED" in html


def test_100k_instructions_render_quickly(tmp_path, rng):
    rec = make_record(rng, n=100_000, num_sms=132)
    t = time.perf_counter()
    render_all(rec, tmp_path)
    elapsed = time.perf_counter() - t
    assert elapsed < 30, f"render_all took {elapsed:.1f}s for 1e5 instructions"
    assert (tmp_path / "gantt.html").stat().st_size < 100 * rec.num_instructions  # compact columns


def test_cli_rerenders_from_npz(tmp_path, rng, capsys):
    rec = make_record(rng, n=200)
    render_all(rec, tmp_path / "a")
    assert main(["--from", str(tmp_path / "a" / "raw.npz"), "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "makespan" in out and "gantt.html" in out
    assert (tmp_path / "b" / "gantt.png").is_file()
    assert np.array_equal(load_npz(tmp_path / "b" / "raw.npz").words, rec.words)
    before = (tmp_path / "a" / "raw.npz").read_bytes()  # re-render in place keeps the raw data
    assert main(["--from", str(tmp_path / "a" / "raw.npz"), "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "raw.npz").read_bytes() == before


def test_cli_errors_are_messages_not_tracebacks(tmp_path, capsys, monkeypatch):
    assert main(["--from", str(tmp_path / "missing.npz"), "--out", str(tmp_path)]) == 2
    assert "missing.npz" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "engine.profiling", None)  # as if the module did not exist
    assert main(["--preset", "tiny", "--backend", "vm", "--out", str(tmp_path)]) == 2
    assert "engine.profiling is missing" in capsys.readouterr().err
    assert main(["--out", str(tmp_path)]) == 2
    with pytest.raises(SystemExit):
        main(["--batch", "0", "--out", str(tmp_path)])


def test_cli_live_path_uses_collector(tmp_path, rng, monkeypatch, capsys):
    import types

    seen = {}

    def collect_profile(args):
        seen.update(vars(args))
        return make_record(rng, n=50, simulated=True)

    monkeypatch.setitem(sys.modules, "engine.profiling", types.SimpleNamespace(collect_profile=collect_profile))
    argv = ["--preset", "tiny", "--backend", "vm", "--batch", "3", "--steps", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert seen["batch"] == 3 and seen["steps"] == 2 and seen["preset"] == "tiny"
    assert (tmp_path / "raw.npz").is_file() and "SIMULATED" in capsys.readouterr().out


def _page_data(page: str) -> dict:
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))


def test_html_carries_waits_phases_and_dependencies(tmp_path, rng):
    import base64

    from synthetic_profiles import make_chain_record

    from profiler.html import render_html
    from profiler.marks import DRAWN_SEGMENTS
    from profiler.spans import to_spans

    rec = make_chain_record(rng, layers=3)
    sp = to_spans(rec)
    (panel,) = _page_data(render_html(sp))["panels"]
    wait = np.frombuffer(base64.b64decode(panel["wait"]), "<f8")
    assert np.array_equal(wait, rec.wait_ns[sp.index])  # the page splits each box at start + wait
    assert panel["segments"] == list(DRAWN_SEGMENTS)
    marks = np.frombuffer(base64.b64decode(panel["marks"]), "<f4").reshape(-1, len(DRAWN_SEGMENTS))
    ready = (rec.start_ns + rec.wait_ns - sp.t0_ns)[sp.index]
    assert (marks[:, 0] > ready).all() and (marks[:, 3] < (rec.end_ns - sp.t0_ns)[sp.index]).all()
    members = np.frombuffer(base64.b64decode(panel["deps"]["group_members"]), "<i4")
    assert sorted(members.tolist()) == list(range(rec.num_instructions))  # every instruction signals
    plain = _page_data(render_html(to_spans(make_record(rng, n=30))))["panels"][0]
    assert plain["marks"] is None and plain["deps"] is None


def test_png_draws_waiting_lighter(tmp_path):
    from matplotlib.colors import to_rgb

    from profiler.colors import opcode_colors
    from profiler.png import WAIT_TINT, render_png
    from profiler.spans import to_spans

    # One SM, one instruction: waiting for its first half, working for the second.
    rec = ProfileRecord(words=np.array([[1, 0]], np.int32), sm=np.array([0]), start_ns=np.array([0]),
                        end_ns=np.array([1000]), wait_ns=np.array([500]), opcode_names={1: "A"}, simulated=False)
    img = imread(render_png(to_spans(rec), tmp_path / "g.png"))[..., :3]
    full = np.array(to_rgb(opcode_colors(rec.opcode_names)[1]))
    light = WAIT_TINT * full + (1 - WAIT_TINT)
    near = lambda c: (np.abs(img - c).max(axis=2) < 0.02)  # noqa: E731
    cols_full, cols_light = np.flatnonzero(near(full).any(axis=0)), np.flatnonzero(near(light).any(axis=0))
    assert cols_full.size > 100 and cols_light.size > 100
    assert np.median(cols_light) < np.median(cols_full)  # the wait comes first, lighter
