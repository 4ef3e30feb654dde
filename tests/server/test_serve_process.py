"""`megakernel serve` as a real process: bad flags exit 2 in one line without binding; SIGTERM drains
(running streams finish, or get an error event after --shutdown-timeout) and exits 0; Ctrl-C ends
the streams at once, quietly, and exits 0."""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server.cli import register

REPO = Path(__file__).resolve().parents[2]
# `megakernel serve` with every engine step slowed down, so a stream certainly outlives a signal.
LAUNCHER = """
import sys, time
from engine.llm_engine import LLMEngine
delay, step = float(sys.argv[1]), LLMEngine.step
def slow_step(self):
    time.sleep(delay)
    return step(self)
LLMEngine.step = slow_step
from engine.cli.main import main
sys.exit(main(sys.argv[2:]))
"""
STREAM = {"prompt": [5, 6, 7], "temperature": 0, "ignore_eos": True, "stream": True}


class ServeProcess:
    def __init__(self, model: Path, step_delay: float, *flags: str):
        cmd = [sys.executable, "-c", LAUNCHER, str(step_delay), "serve", "--model", str(model), "--backend", "torch",
               "--dtype", "float32", "--max-model-len", "256", "--port", "0",
               "--decode-steps", "1",  # the delay slows every token, so streams outlive the signals
               # the delay patches this process's engine: it stays here unless a test asks for the child
               *(() if "--engine-process" in flags else ("--no-engine-process",)), *flags]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self._wait_url()
        deadline = time.monotonic() + 120
        while httpx.get(self.url + "/health").status_code != 200:
            assert time.monotonic() < deadline and self.proc.poll() is None, self.output
            time.sleep(0.1)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def _wait_url(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on (http://\S+?);", self.output)
            if m:
                return m.group(1)
            time.sleep(0.05)
        raise AssertionError(f"serve did not start:\n{self.output}")

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture()
def serve_process(tiny_dir: Path) -> Iterator[Any]:
    started: list[ServeProcess] = []

    def start(step_delay: float, *flags: str) -> ServeProcess:
        started.append(ServeProcess(tiny_dir, step_delay, *flags))
        return started[-1]

    yield start
    for p in started:
        p.kill()


def _stream_then_signal(proc: ServeProcess, body: dict[str, Any], sig: int) -> list[Any]:
    """Open a stream, send `sig` once its first token arrived, return every event (parsed)."""
    events: list[Any] = []
    with httpx.Client(timeout=60) as http, http.stream("POST", proc.url + "/v1/completions", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append("[DONE]" if line == "data: [DONE]" else json.loads(line[6:]))
            if len(events) == 1:
                proc.proc.send_signal(sig)
    return events


def test_sigterm_lets_running_stream_finish(serve_process: Any) -> None:
    proc = serve_process(0.01, "--shutdown-timeout", "30")
    events = _stream_then_signal(proc, {**STREAM, "max_tokens": 40}, signal.SIGTERM)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
    assert all("error" not in e for e in events[:-1])
    assert proc.wait(30) == 0
    assert "Traceback" not in proc.output


def test_sigterm_past_timeout_ends_stream_with_error_event(serve_process: Any) -> None:
    proc = serve_process(0.05, "--shutdown-timeout", "0.5")
    start = time.monotonic()
    events = _stream_then_signal(proc, {**STREAM, "max_tokens": 200}, signal.SIGTERM)
    assert time.monotonic() - start < 8  # 200 tokens would take 10 s
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "shutting_down"
    assert proc.wait(30) == 0
    assert "Traceback" not in proc.output


def test_ctrl_c_ends_streams_at_once_quietly(serve_process: Any) -> None:
    proc = serve_process(0.05, "--shutdown-timeout", "30")
    events = _stream_then_signal(proc, {**STREAM, "max_tokens": 200}, signal.SIGINT)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "shutting_down"
    assert proc.wait(30) == 0
    assert "Traceback" not in proc.output and "CancelledError" not in proc.output


@pytest.mark.parametrize("flags,names", [
    (["--num-pages", "0"], "--num-pages"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--max-pending", "0"], "--max-pending"),
    (["--shutdown-timeout", "-1"], "--shutdown-timeout"),
    (["--stream-interval", "0"], "--stream-interval"),
    (["--allowed-origins", "not an origin"], "--allowed-origins"),
    (["--port", "70000"], "--port"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size"),
    (["--tensor-parallel-size", "4"], "--tensor-parallel-size 4 does not divide num_key_value_heads"),
    (["--tensor-parallel-size", "3", "--backend", "vm"], "--tensor-parallel-size 3 does not divide num_attention_heads"),
])
def test_bad_flags_exit_2(tiny_dir: Path, flags: list[str], names: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="megakernel")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--model", str(tiny_dir), "--backend", "torch", *flags])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"megakernel serve: error: {names}"), err


def test_bad_flag_process_prints_one_line(tmp_path: Path, tiny_dir: Path) -> None:
    """The real command: exit 2, one line on stderr naming the flag, no traceback, nothing bound."""
    for flags, names in ((["--model", str(tiny_dir), "--num-pages", "0"], "--num-pages"),
                         (["--model", str(tmp_path)], "config.json"),
                         (["--model", str(tiny_dir), "--port", "not-a-number"], "--port")):
        run = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--backend", "torch", *flags],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        assert run.returncode == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("megakernel serve: error: ") and names in lines[0], lines
        assert "Uvicorn running" not in run.stdout + run.stderr


def test_engine_process_serves_and_ends_with_the_server(serve_process: Any) -> None:
    proc = serve_process(0.0, "--engine-process")
    r = httpx.post(proc.url + "/v1/completions", timeout=60,
                   json={"prompt": [5, 6, 7], "max_tokens": 5, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
    children = [p for p in Path("/proc").glob("[0-9]*") if _parent_pid(p) == proc.proc.pid]
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.output
    assert not [p for p in children if p.exists() and _parent_pid(p) == proc.proc.pid]


def _parent_pid(proc_dir: Path) -> int | None:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
