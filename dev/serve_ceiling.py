"""CPU only: what the server and the engine's host side allow when the model costs a fixed time per step. The engine
runs a tiny random checkpoint whose backend sleeps `--step-ms` per step (the GPU's share, released like a CUDA sync
releases the GIL) and returns logits that favour one token, behind the real FastAPI app on a local port; then
`megakernel bench-serve` drives it with `--clients` streams of `--input-len` in / `--output-len` out. Prints the
output tok/s against the ceiling the step time alone allows (clients / step time), so what the host side (scheduler,
batch building, sampling, detokenising, the HTTP stream of every token) costs shows, and the CPU time the event loop
thread and the engine thread spent per output token: the two hold one GIL in turn, so their sum per token bounds the
output tok/s of one server process whatever the GPU does. The benchmark client shares this machine's CPUs with the
server (on the GPU hosts it has cores of its own).
Usage: python -m dev.serve_ceiling [--step-ms 2.4] [--clients 32] [--requests 128]"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time

import torch
import uvicorn

from engine import LLMEngine
from models.llama.init_random import init_random_checkpoint
from models.llama.step_batch import StepBatch
from server.app import build_app
from server.async_engine import ENGINE_THREAD


def _cpu_seconds(thread: threading.Thread) -> float:
    """CPU time a thread has used (user + system, so its socket writes count; waiting for the GIL does not)."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-ms", type=float, default=2.4, help="the model's time per step (H200 1B batch 32: 2.4)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        init_random_checkpoint("tiny", tmp, seed=0, dtype="float32", progress=False)
        engine = LLMEngine(tmp, backend="torch", device="cpu", max_num_seqs=max(64, args.clients), progress=False)
        vocab = engine.config.vocab_size

        def timed_forward(batch: StepBatch) -> torch.Tensor:
            time.sleep(args.step_ms / 1e3)
            logits = torch.zeros(batch.num_seqs, vocab)
            logits[:, 7] = 1.0
            return logits

        engine.backend.forward = timed_forward  # type: ignore[method-assign]
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        server = uvicorn.Server(uvicorn.Config(build_app(engine, "tiny"), host="127.0.0.1", port=port,
                                               log_level="warning"))
        loop_thread = threading.Thread(target=server.run, daemon=True)
        loop_thread.start()
        while not server.started:
            time.sleep(0.05)
        engine_thread = next(t for t in threading.enumerate() if t.name == ENGINE_THREAD)
        cpu_before = [_cpu_seconds(t) for t in (loop_thread, engine_thread)]
        out = subprocess.run([sys.executable, "-m", "engine.cli", "bench-serve", "--base-url", f"http://127.0.0.1:{port}",
                              "--num-prompts", str(args.requests), "--input-len", str(args.input_len),
                              "--output-len", str(args.output_len), "--max-concurrency", str(args.clients)],
                             capture_output=True, text=True, check=False)
        cpu_after = [_cpu_seconds(t) for t in (loop_thread, engine_thread)]
        server.should_exit = True
    lines = [ln for ln in out.stdout.splitlines() if "tok/s" in ln or "TPOT" in ln or "TTFT" in ln]
    print("\n".join(lines) or out.stdout + out.stderr)
    tokens = args.requests * args.output_len
    loop_us, engine_us = ((b - a) / tokens * 1e6 for a, b in zip(cpu_before, cpu_after))
    print(f"CPU per output token: event loop thread {loop_us:.1f} us, engine thread {engine_us:.1f} us (the two share "
          f"one GIL: at most {1e6 / (loop_us + engine_us):.0f} output tok/s from this process on this CPU)")
    print(f"ceiling from the step time alone: {args.clients / (args.step_ms / 1e3):.0f} output tok/s "
          f"({args.clients} clients / {args.step_ms} ms)")


if __name__ == "__main__":
    main()
