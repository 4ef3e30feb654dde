"""`megakernel serve` and `megakernel bench-serve` subcommands."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
from typing import NoReturn

from engine.cli.engine_flags import add_engine_flags
from engine.engine_config import EngineConfig
from server.bench_serve import BenchConfig
from server.log_setup import configure_logging
from server.serve_options import (API_KEY_ENV, DEFAULT_HOST, DEFAULT_MAX_PENDING, DEFAULT_MAX_REQUEST_BYTES,
                                  DEFAULT_PORT, DEFAULT_SHUTDOWN_TIMEOUT_S, DEFAULT_STREAM_INTERVAL, FlagError,
                                  check_engine_flags, engine_kwargs, serve_options)

log = logging.getLogger(__name__)

EXIT_BAD_FLAGS = 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server (FastAPI + uvicorn); docs/SERVING.md")
    # Engine settings: EngineConfig's field defaults (engine/engine_config.py).
    add_engine_flags(p)
    p.add_argument("--page-size", type=int, default=EngineConfig.page_size)
    p.add_argument("--num-pages", type=int, default=EngineConfig.num_pages)
    # The front end's: server/serve_options.py.
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--served-model-name", default=None,
                   help="model id clients send (default: the last path component of --model)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on /v1 routes (default: ${API_KEY_ENV}, else none)")
    p.add_argument("--allowed-origins", default=None,
                   help="comma-separated CORS origins, e.g. https://app.example.com (default: no CORS)")
    p.add_argument("--max-pending", type=int, default=DEFAULT_MAX_PENDING,
                   help=f"in-flight generations (running + waiting) before answering 503 "
                        f"(default {DEFAULT_MAX_PENDING})")
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                   help=f"largest request body accepted; larger gets 413 "
                        f"(default {DEFAULT_MAX_REQUEST_BYTES >> 20} MiB)")
    p.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT_S,
                   help=f"on SIGTERM, seconds running requests get to finish (default {DEFAULT_SHUTDOWN_TIMEOUT_S:g})")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--stream-interval", type=int, default=DEFAULT_STREAM_INTERVAL, metavar="N",
                   help="a stream's tokens gathered between writes, as vLLM's (the first is sent at once; a finishing "
                        "choice flushes); more than 1 cuts the server's work per token at high concurrency "
                        f"(default {DEFAULT_STREAM_INTERVAL})")
    p.add_argument("--engine-process", action=argparse.BooleanOptionalAction, default=None,
                   help="run the engine in a process of its own, so the HTTP side and the engine do not share one "
                        "GIL (default: on, except under torchrun, where rank 0's engine stays in its process)")
    p.set_defaults(func=_serve)
    _one_line_errors(p)

    # bench-serve's defaults: BenchConfig's (server/bench_serve.py).
    p = sub.add_parser("bench-serve", help="load-test a running server (like `vllm bench serve`)")
    p.add_argument("--base-url", default=BenchConfig.base_url)
    p.add_argument("--model", default=BenchConfig.model, help="default: the server's first model")
    p.add_argument("--num-prompts", type=int, default=BenchConfig.num_prompts)
    p.add_argument("--input-len", type=int, default=BenchConfig.input_len)
    p.add_argument("--output-len", type=int, default=BenchConfig.output_len)
    p.add_argument("--range-ratio", type=float, default=BenchConfig.range_ratio,
                   help="lengths uniform in [len*(1-r), len*(1+r)]")
    p.add_argument("--request-rate", type=float, default=BenchConfig.request_rate,
                   help=f"requests/s, Poisson (default {BenchConfig.request_rate})")
    p.add_argument("--max-concurrency", type=int, default=BenchConfig.max_concurrency)
    p.add_argument("--seed", type=int, default=BenchConfig.seed)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", default=BenchConfig.ignore_eos)
    p.add_argument("--temperature", type=float, default=BenchConfig.temperature,
                   help="0 is greedy; above, every request samples (on the GPU with the cuda backend)")
    p.add_argument("--api-key", default=BenchConfig.api_key)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--output", default=None, help="also write the JSON results to this file")
    p.add_argument("--sweep", default=None, metavar="N,N,...",
                   help="run at each of these concurrencies in turn (e.g. 1,8,32,128; each with at least N prompts) "
                        "and print one row per level instead of one report")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="with --sweep: write output tok/s and TTFT p50/p99 against concurrency to this PNG")
    p.set_defaults(func=_bench_serve)


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """argparse prints the usage before its error; `serve` errors are one line (exit 2), like the rest."""
    def error(message: str) -> NoReturn:
        print(f"megakernel {parser.prog.split()[-1]}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_FLAGS)

    parser.error = error  # type: ignore[method-assign]


def _serve(args: argparse.Namespace) -> int:
    """0 after a clean shutdown, 1 when the engine failed, 2 for a bad flag (nothing was bound)."""
    try:
        opts = serve_options(args)
        check_engine_flags(args)
        sock = _bind(opts.host, opts.port)
    except FlagError as exc:
        print(f"megakernel serve: error: {exc}", file=sys.stderr)
        return EXIT_BAD_FLAGS
    configure_logging(args.log_level)
    import uvicorn

    from server.app import build_app
    from server.async_engine import AsyncEngine
    from server.graceful import GracefulServer

    url = f"http://{opts.host}:{sock.getsockname()[1]}"

    from server.engine_process import EngineProcessClient
    from server.serving_engine import EngineSpec, freeze_startup_heap, load_serving_engine

    def load() -> object:
        if opts.engine_process:
            client = EngineProcessClient(EngineSpec(args.model_dir, engine_kwargs(args), args.model,
                                                    opts.served_model_name, url, args.log_level))
            freeze_startup_heap()  # this process's: the child froze its own
            return client
        return load_serving_engine(args.model_dir, engine_kwargs(args), args.model, opts.served_model_name, url)

    # The engine loads in its own thread after the server starts listening, so /health says 503
    # (not "connection refused") while a large checkpoint loads.
    aeng = AsyncEngine(engine_factory=load, served_model_name=opts.served_model_name, max_pending=opts.max_pending,
                       stream_interval=opts.stream_interval)
    app = build_app(aeng, api_key=opts.api_key, cors_origins=opts.allowed_origins,
                    max_request_bytes=opts.max_request_bytes)
    server = GracefulServer(uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=5),
                            aeng, opts.shutdown_timeout)
    aeng.on_fatal = server.on_engine_fatal
    log.info("listening on %s; loading %s (backend %s, dtype %s)", url, args.model, args.backend, args.dtype)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 1 if aeng.error else 0


def _bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        raise FlagError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _bench_serve(args: argparse.Namespace) -> int:
    from server.bench_serve import BenchConfig, format_report, run_benchmark

    cfg = BenchConfig(base_url=args.base_url, model=args.model, num_prompts=args.num_prompts,
                      input_len=args.input_len, output_len=args.output_len, range_ratio=args.range_ratio,
                      request_rate=args.request_rate, max_concurrency=args.max_concurrency, seed=args.seed,
                      ignore_eos=args.ignore_eos, api_key=args.api_key, temperature=args.temperature)
    if args.plot and not args.sweep:
        raise ValueError("--plot needs --sweep (a plot of one concurrency level is one point)")
    if args.sweep:
        from server.bench_sweep import format_sweep, parse_levels, plot_sweep, run_sweep

        rows = asyncio.run(run_sweep(cfg, parse_levels(args.sweep)))
        text = json.dumps({"sweep": rows}, indent=2)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text + "\n")
        print(text if args.json else format_sweep(rows))
        if args.plot:
            print(f"wrote {plot_sweep(rows, args.plot, title=f'{cfg.input_len} in / {cfg.output_len} out')}")
        return 0 if all(r["completed"] > 0 for r in rows) else 1
    summary = asyncio.run(run_benchmark(cfg))
    text = json.dumps(summary, indent=2)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    print(text if args.json else format_report(summary))
    return 0 if summary["completed"] > 0 else 1
