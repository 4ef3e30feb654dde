"""CPU only: what the server and the engine's host side allow when the model costs a fixed time per step. The engine
runs a tiny random checkpoint whose backend sleeps `--step-ms` per step (the GPU's share, released like a CUDA sync
releases the GIL) and returns logits that favour one token, behind the real FastAPI app on a local port; then
`megakernel bench-serve` drives it with `--clients` streams of `--input-len` in / `--output-len` out. Prints the
output tok/s against the ceiling the step time alone allows (clients / step time), so what the host side (scheduler,
batch building, sampling, detokenising, the HTTP stream of every token) costs shows, and the CPU time the event loop
thread and the engine thread spent per output token: the two hold one GIL in turn, so their sum per token bounds the
output tok/s of one server process whatever the GPU does. The benchmark client shares this machine's CPUs with the
server (on the GPU hosts it has cores of its own).
With `--step-ms 0` each step takes the time an H200's would for the 1B shape (dev/simulated_device.py: from its padded
shape; runs of decode steps queued ahead of the host), and the engine's wall seconds per kind of step are printed.
Usage: python -m dev.serve_ceiling [--step-ms 2.4] [--clients 32] [--requests 128] [--max-num-seqs N]
       [--engine-process] [--stream-interval N]"""
from __future__ import annotations

import argparse
import functools
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import torch
import uvicorn

from dev.serve_probe import process_cpu_seconds
from dev.simulated_device import simulate_device
from engine import LLMEngine
from engine.cuda.step_padding import padded_budget
from engine.engine_config import EngineConfig
from models.llama.init_random import init_random_checkpoint
from models.llama.step_batch import StepBatch
from server.app import build_app
from server.async_engine import ENGINE_THREAD, AsyncEngine
from server.engine_process import EngineProcessClient
from server.serving_engine import EngineSpec, freeze_startup_heap


def _cpu_seconds(thread: threading.Thread) -> float:
    """CPU time a thread has used (user + system, so its socket writes count; waiting for the GIL does not)."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def sleeping_engine(model_dir: str, engine_kwargs: dict[str, Any], *_labels: str, step_ms: float) -> LLMEngine:
    """The tiny checkpoint's engine whose forward sleeps `step_ms` and favours token 7 (module-level: an
    --engine-process child loads it by reference); `step_ms` 0: dev/simulated_device.py's H200 model."""
    torch.set_num_threads(1)  # the fixed logits need no thread pool (whose spinning would count as engine CPU time)
    engine = LLMEngine(model_dir, **engine_kwargs)
    vocab = engine.config.vocab_size
    if step_ms == 0:
        simulate_device(engine.backend, vocab)
        return engine

    def timed_forward(batch: StepBatch) -> torch.Tensor:
        time.sleep(step_ms / 1e3)
        logits = torch.zeros(batch.num_seqs, vocab)
        logits[:, 7] = 1.0
        return logits

    engine.backend.forward = timed_forward  # type: ignore[method-assign]
    return engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-ms", type=float, default=2.4, help="the model's time per step (H200 1B batch 32: 2.4); 0: "
                    "each step's time from its padded shape and runs of decode steps queued ahead of the host "
                    "(dev/simulated_device.py, the H200's 1B)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--max-num-seqs", type=int, default=0, help="the engine's seats (default: the engine's, or --clients if more)")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--engine-process", action="store_true", help="the engine in a process of its own, as "
                    "`megakernel serve --engine-process`")
    ap.add_argument("--stream-interval", type=int, default=1, help="as `megakernel serve --stream-interval`")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        init_random_checkpoint("tiny", tmp, seed=0, dtype="float32", progress=False)
        seats = args.max_num_seqs or max(EngineConfig.max_num_seqs, args.clients)
        kwargs = {"backend": "torch", "device": "cpu", "max_num_seqs": seats, "progress": False}
        if args.step_ms == 0:  # the cuda backend's scheduler budget (room for its padding's dummy sequences)
            kwargs["max_num_batched_tokens"] = padded_budget(EngineConfig.max_num_batched_tokens, seats)
        if args.engine_process:
            spec = EngineSpec(tmp, kwargs, "tiny", "tiny", "-", "warning",
                              loader=functools.partial(sleeping_engine, step_ms=args.step_ms))
            aeng = AsyncEngine(engine_factory=lambda: EngineProcessClient(spec), served_model_name="tiny",
                               stream_interval=args.stream_interval)
        else:
            aeng = AsyncEngine(sleeping_engine(tmp, kwargs, step_ms=args.step_ms), served_model_name="tiny",
                               stream_interval=args.stream_interval)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        server = uvicorn.Server(uvicorn.Config(build_app(aeng), host="127.0.0.1", port=port, log_level="warning"))
        loop_thread = threading.Thread(target=server.run, daemon=True)
        loop_thread.start()
        while not (server.started and aeng.is_ready):
            time.sleep(0.05)
        engine_thread = next(t for t in threading.enumerate() if t.name == ENGINE_THREAD)
        child = getattr(aeng.engine, "pid", None)
        cpu = lambda: [_cpu_seconds(t) for t in (loop_thread, engine_thread)] + (  # noqa: E731
            [process_cpu_seconds(child)] if child is not None else [])
        if not args.engine_process:  # as the server's load_serving_engine leaves its process (the child: its own)
            freeze_startup_heap()
        cpu_before = cpu()
        out = subprocess.run([sys.executable, "-m", "engine.cli", "bench-serve", "--base-url", f"http://127.0.0.1:{port}",
                              "--num-prompts", str(args.requests), "--input-len", str(args.input_len),
                              "--output-len", str(args.output_len), "--max-concurrency", str(args.clients)],
                             capture_output=True, text=True, check=False)
        cpu_after = cpu()
        try:
            aeng_stats = aeng.engine.get_stats()
        except Exception:  # noqa: BLE001 - the breakdown is extra
            aeng_stats = None
        server.should_exit = True
    lines = [ln for ln in out.stdout.splitlines() if "tok/s" in ln or "TPOT" in ln or "TTFT" in ln]
    print("\n".join(lines) or out.stdout + out.stderr)
    tokens = args.requests * args.output_len
    loop_us, engine_us, *child_us = ((b - a) / tokens * 1e6 for a, b in zip(cpu_before, cpu_after))
    print(f"CPU per output token: event loop thread {loop_us:.1f} us, engine thread {engine_us:.1f} us (the two share "
          f"one GIL: at most {1e6 / (loop_us + engine_us):.0f} output tok/s from this process on this CPU)"
          + (f"; the engine process {child_us[0]:.1f} us" if args.engine_process and child_us else ""))
    if args.step_ms:
        print(f"ceiling from the step time alone: {args.clients / (args.step_ms / 1e3):.0f} output tok/s "
              f"({args.clients} clients / {args.step_ms} ms)")
    stats = aeng_stats
    if stats is not None and stats.step_times is not None:
        t = stats.step_times
        print("engine wall seconds per kind of step: " + ", ".join(
            f"{k} {t.steps[k]} steps {t.seconds[k]:.2f} s" for k in t.steps))


if __name__ == "__main__":
    main()
