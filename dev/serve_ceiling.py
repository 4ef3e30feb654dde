"""CPU only: what the server and the engine's host side allow when the model costs a fixed time per step. The engine
runs a tiny random checkpoint whose backend sleeps `--step-ms` per step (the GPU's share, released like a CUDA sync
releases the GIL) and returns logits that favour one token, behind the real FastAPI app on a local port; then
`megakernel bench-serve` drives it with `--clients` streams of `--input-len` in / `--output-len` out. Prints the
output tok/s against the ceiling the step time alone allows (clients / step time), so what the host side (scheduler,
batch building, sampling, detokenising, the HTTP stream of every token) costs shows. The benchmark client shares
this machine's CPUs with the server, as on the GPU hosts.
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
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        out = subprocess.run([sys.executable, "-m", "engine.cli", "bench-serve", "--base-url", f"http://127.0.0.1:{port}",
                              "--num-prompts", str(args.requests), "--input-len", str(args.input_len),
                              "--output-len", str(args.output_len), "--max-concurrency", str(args.clients)],
                             capture_output=True, text=True, check=False)
        server.should_exit = True
    lines = [ln for ln in out.stdout.splitlines() if "tok/s" in ln or "TPOT" in ln or "TTFT" in ln]
    print("\n".join(lines) or out.stdout + out.stderr)
    print(f"ceiling from the step time alone: {args.clients / (args.step_ms / 1e3):.0f} output tok/s "
          f"({args.clients} clients / {args.step_ms} ms)")


if __name__ == "__main__":
    main()
