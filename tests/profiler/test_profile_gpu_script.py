"""scripts/gpu_check.sh's profile part keeps the raw recording, so a GPU run can be re-rendered with --from."""
from __future__ import annotations

import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def test_profile_part_keeps_and_checks_raw_npz():
    text = SCRIPT.read_text()
    part = re.search(r"^\s*profile\)(.*?);;", text, re.S | re.M).group(1)
    assert '--out "$OUT/profile"' in part
    removed = " ".join(line for line in part.splitlines() if "rm " in line)
    assert "raw.npz" not in removed
    assert 'test -s "$OUT/profile/raw.npz"' in part  # a run that wrote no recording fails the part
