"""`torchrun --nproc-per-node 2 -m engine.cli serve --tensor-parallel-size 2` on CPUs (the torch backend over gloo): rank
0 serves the completion one process serves, and the launch ends when torchrun is told to stop."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
BODY = {"prompt": [5, 6, 7, 8], "max_tokens": 8, "temperature": 0, "ignore_eos": True}


def test_rank_zero_serves_what_one_process_generates(tiny_dir: Path) -> None:
    from engine import LLM, SamplingParams

    want = LLM(str(tiny_dir), backend="torch", dtype="float32", progress=False).generate(
        [{"prompt_token_ids": BODY["prompt"]}], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             "-m", "engine.cli", "serve", "--model", str(tiny_dir), "--backend", "torch", "--dtype",
                             "float32", "--max-model-len", "256", "--port", "0", "--tensor-parallel-size", "2"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True).start()
    try:
        deadline, url = time.monotonic() + 180, None
        while url is None:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            m = re.search(r"listening on (http://\S+?);", "".join(lines))
            url = m.group(1) if m else None
            time.sleep(0.1)
        while httpx.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.1)
        r = httpx.post(url + "/v1/completions", json={"model": httpx.get(url + "/v1/models").json()["data"][0]["id"],
                                                      **BODY}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want[0].outputs[0].text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # torchrun passes it on to its ranks
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the torchrun launch did not end within 60 s of SIGTERM:\n" + "".join(lines))
