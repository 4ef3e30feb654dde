"""`megakernel profile --from` on bad input: one line naming the file, exit 2, no traceback."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from synthetic_profiles import make_record

from engine.cli.main import main as megakernel
from profiler.record import save_npz


def _bad_files(tmp_path, rng) -> dict[str, object]:
    good = save_npz(make_record(rng, n=50), tmp_path / "good" / "raw.npz")
    data = good.read_bytes()
    text = tmp_path / "notes.txt"
    text.write_text("not a recording\n")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, weights=np.ones(3))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, header=np.array([{"a": 1}], dtype=object), words=np.ones((2, 2), np.int32))
    wrong_header = tmp_path / "wrong_header.npz"
    buf = io.BytesIO()
    np.savez(buf, **{**dict(np.load(good)), "header": np.array(json.dumps({"format": "other", "version": 7}))})
    wrong_header.write_bytes(buf.getvalue())
    empty_dir = tmp_path / "empty_dir"
    empty_dir.mkdir()
    return {"missing": tmp_path / "missing.npz", "text": text, "truncated": truncated, "foreign": foreign,
            "pickled": pickled, "wrong_header": wrong_header, "empty_dir": empty_dir}


@pytest.mark.parametrize("case,words", [
    ("missing", "no such profile file"), ("text", "not a profile recording"),
    ("truncated", "not a profile recording"), ("foreign", "missing field 'header'"),
    ("pickled", "damaged or foreign"), ("wrong_header", "is not megakernel-profile"),
    ("empty_dir", "has no raw.npz"),
])
def test_bad_from_is_one_line_exit_2(tmp_path, rng, capsys, case, words):
    bad = _bad_files(tmp_path, rng)[case]
    assert megakernel(["profile", "--from", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("megakernel profile: error: ") and str(bad) in err and words in err, err
    assert "pickle" not in err.lower() or case == "pickled"


def test_from_accepts_the_output_directory(tmp_path, rng, capsys):
    save_npz(make_record(rng, n=60), tmp_path / "prof" / "raw.npz")
    assert megakernel(["profile", "--from", str(tmp_path / "prof"), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "gantt.html").is_file() and "makespan" in capsys.readouterr().out


def test_bad_from_in_a_subprocess(tmp_path):
    bad = tmp_path / "notes.npz"
    bad.write_text("hello")
    done = subprocess.run([sys.executable, "-m", "engine.cli", "profile", "--from", str(bad), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"megakernel profile: error: {bad}: not a profile recording "
                                                "(not an .npz file, or a truncated one)"]
