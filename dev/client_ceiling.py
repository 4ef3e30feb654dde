"""CPU only: how many output tokens per second `megakernel bench-serve` itself can take in, so a serving number is
known not to be the client's. A stand-in OpenAI server (Starlette on uvicorn, another process) streams every request's
tokens as fast as it can, `--per-write` chunks to a socket write, then the usage chunk; `bench-serve` drives it at each
`--concurrency`, 128 in / 128 out. The stand-in shares this machine's CPUs with the client.
Usage: python -m dev.client_ceiling [--concurrency 32,128] [--per-write 1]"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time

import httpx

OUTPUT_LEN = 128


def _chunk(i: int, n: int) -> str:
    body = {"id": "x", "object": "text_completion", "created": 0, "model": "stand-in",
            "choices": [{"index": 0, "text": "ab", "logprobs": None,
                         "finish_reason": "length" if i == n - 1 else None, "stop_reason": None}]}
    return "data: " + json.dumps(body, separators=(",", ":")) + "\n\n"


def serve(port: int, per_write: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def completions(request: Request) -> StreamingResponse:
        n = int((await request.json()).get("max_tokens", OUTPUT_LEN))
        chunks = [_chunk(i, n) for i in range(n)]
        usage = {"id": "x", "choices": [], "usage": {"prompt_tokens": 128, "completion_tokens": n,
                                                      "total_tokens": n + 128}}

        async def body():  # noqa: ANN202
            for i in range(0, n, per_write):
                yield "".join(chunks[i:i + per_write])
                await asyncio.sleep(0)
            yield "data: " + json.dumps(usage) + "\n\n" + "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]), Route("/v1/models", models)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="32,128")
    ap.add_argument("--per-write", type=int, default=1, help="token chunks per socket write of the stand-in")
    ap.add_argument("--serve-port", type=int, default=None, help=argparse.SUPPRESS)  # the stand-in's own process
    args = ap.parse_args()
    if args.serve_port is not None:
        serve(args.serve_port, args.per_write)
        return
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen([sys.executable, "-m", "dev.client_ceiling", "--serve-port", str(port),
                               "--per-write", str(args.per_write)])
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/v1/models")
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for c in (int(x) for x in args.concurrency.split(",")):
            out = subprocess.run([sys.executable, "-m", "engine.cli", "bench-serve", "--base-url", url, "--num-prompts",
                                  str(8 * c), "--input-len", "128", "--output-len", str(OUTPUT_LEN),
                                  "--max-concurrency", str(c)], capture_output=True, text=True, check=False)
            lines = [ln for ln in out.stdout.splitlines() if "Output token" in ln or "Median TPOT" in ln]
            summary = "; ".join(" ".join(ln.split()) for ln in lines)
            print(f"concurrency {c}, {args.per_write} chunk(s) per write: {summary}")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
