"""`megakernel serve` and `megakernel bench-serve` subcommands."""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server (FastAPI + uvicorn)")
    p.add_argument("--model", required=True, help="checkpoint directory (Hugging Face layout)")
    p.add_argument("--backend", default="auto", choices=["auto", "cuda", "vm", "torch"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--num-pages", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--served-model-name", default=None, help="model id clients send (default: --model)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 routes")
    p.add_argument("--max-pending", type=int, default=1024,
                   help="in-flight requests (running + waiting) before answering 503")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_serve)

    p = sub.add_parser("bench-serve", help="load-test a running server (like `vllm bench serve`)")
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="default: the server's first model")
    p.add_argument("--num-prompts", type=int, default=100)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--range-ratio", type=float, default=0.0,
                   help="lengths uniform in [len*(1-r), len*(1+r)]")
    p.add_argument("--request-rate", type=float, default=math.inf, help="requests/s, Poisson (default inf)")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    p.add_argument("--api-key", default=None)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--output", default=None, help="also write the JSON results to this file")
    p.set_defaults(func=_bench_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from server.app import build_app
    from server.async_engine import AsyncEngine

    def load() -> object:
        try:
            return _load_engine(args)
        except BaseException as exc:
            # A server that can never serve is useless: report and stop uvicorn (exit status 1).
            print(f"megakernel serve: error: failed to load {args.model}: {exc}", file=sys.stderr, flush=True)
            server.should_exit = True
            raise

    name = args.served_model_name or args.model
    # The engine loads in its own thread after the server starts listening, so /health says 503
    # (not "connection refused") while a large checkpoint loads.
    aeng = AsyncEngine(engine_factory=load, served_model_name=name, max_pending=args.max_pending)
    app = build_app(aeng, served_model_name=name, api_key=args.api_key)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                           timeout_graceful_shutdown=5))
    server.run()
    if aeng.error:
        print(f"megakernel serve: {aeng.error}", file=sys.stderr)
        return 1
    return 0


def _load_engine(args: argparse.Namespace) -> object:
    from engine import LLMEngine
    print(f"megakernel serve: loading {args.model} (backend {args.backend}, dtype {args.dtype}) ...",
          file=sys.stderr, flush=True)
    engine = LLMEngine(args.model, backend=args.backend, dtype=args.dtype, max_model_len=args.max_model_len,
                       max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                       page_size=args.page_size, num_pages=args.num_pages, seed=args.seed)
    print(f"megakernel serve: ready (backend {engine.backend_name}, max_model_len {engine.max_model_len})"
          f" on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    return engine


def _bench_serve(args: argparse.Namespace) -> int:
    from server.bench_serve import BenchConfig, format_report, run_benchmark

    cfg = BenchConfig(base_url=args.base_url, model=args.model, num_prompts=args.num_prompts,
                      input_len=args.input_len, output_len=args.output_len, range_ratio=args.range_ratio,
                      request_rate=args.request_rate, max_concurrency=args.max_concurrency, seed=args.seed,
                      ignore_eos=args.ignore_eos, api_key=args.api_key)
    summary = asyncio.run(run_benchmark(cfg))
    text = json.dumps(summary, indent=2)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    print(text if args.json else format_report(summary))
    return 0 if summary["completed"] > 0 else 1
