"""Request scheduling must not import torch (it is unit-tested and run on CPU-only hosts)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_scheduler_modules_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import engine.sequence, engine.scheduler, engine.scheduler.requests, "
        "engine.scheduler.requests.block_manager, engine.scheduler.requests.request_scheduler, "
        "engine.scheduler.requests.scheduler_types\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.') or m == 'numpy')\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
