"""`megakernel bench-serve`: load-test a running server like `vllm bench serve`.

A fixed, seeded request mix (random token-id prompts; input/output lengths drawn uniformly within
± range_ratio of the targets) is sent over streaming /v1/completions with `ignore_eos`, at a Poisson
request rate or with bounded concurrency. TTFT is the time to the first chunk with choices (as in
`vllm bench serve`, its text may be empty), ITL the gaps between later chunks, TPOT
(e2e - TTFT) / (output tokens - 1); token counts come from the server's usage chunk. Where the server exports
them, its own counters read before and after the pass add where its time went (server/bench_server_side.py).
"""
from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from server.bench_server_side import breakdown, format_breakdown, read_counters
from server.serve_options import DEFAULT_HOST, DEFAULT_PORT


@dataclass(frozen=True)
class BenchConfig:
    base_url: str = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
    model: str | None = None  # default: the server's first model
    num_prompts: int = 100
    input_len: int = 128
    output_len: int = 64
    range_ratio: float = 0.0
    request_rate: float = math.inf  # requests/s (Poisson); inf = send all at once
    max_concurrency: int | None = None
    seed: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0  # 0: greedy; above, every request samples at this temperature (top_p 1)
    token_id_range: int = 256  # prompts use ids in [0, this): byte tokens exist in every Llama vocab
    api_key: str | None = None
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.num_prompts < 1 or self.input_len < 1 or self.output_len < 1:
            raise ValueError("num_prompts, input_len and output_len must be >= 1")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ValueError(f"range_ratio must be in [0, 1), got {self.range_ratio}")
        if not self.request_rate > 0:
            raise ValueError(f"request_rate must be > 0, got {self.request_rate}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")


@dataclass(frozen=True)
class BenchRequest:
    prompt: list[int]
    output_len: int


@dataclass
class RequestResult:
    ok: bool = False
    error: str = ""
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)


def _length(rng: random.Random, target: int, ratio: float) -> int:
    lo, hi = max(1, int(target * (1 - ratio))), max(1, int(target * (1 + ratio)))
    return rng.randint(lo, hi)


def make_requests(cfg: BenchConfig) -> list[BenchRequest]:
    """The seeded request mix: same config -> same prompts and lengths."""
    rng = random.Random(cfg.seed)
    out = []
    for _ in range(cfg.num_prompts):
        n_in = _length(rng, cfg.input_len, cfg.range_ratio)
        prompt = [rng.randrange(cfg.token_id_range) for _ in range(n_in)]
        out.append(BenchRequest(prompt, _length(rng, cfg.output_len, cfg.range_ratio)))
    return out


async def _one(client: httpx.AsyncClient, cfg: BenchConfig, model: str, req: BenchRequest) -> RequestResult:
    body = {"model": model, "prompt": req.prompt, "max_tokens": req.output_len, "temperature": cfg.temperature,
            "ignore_eos": cfg.ignore_eos, "stream": True, "stream_options": {"include_usage": True}}
    res = RequestResult()
    start = time.perf_counter()
    last = start
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                res.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode()[:200]}"
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = chunk["error"].get("message", "stream error")
                    return res
                now = time.perf_counter()
                if chunk.get("usage"):
                    res.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    res.output_tokens = chunk["usage"]["completion_tokens"]
                if chunk.get("choices"):  # text may be empty (held-back bytes): still a token
                    if res.ttft == 0.0:
                        res.ttft = now - start
                    else:
                        res.itl.append(now - last)
                    last = now
        res.e2e = time.perf_counter() - start
        res.ok = res.ttft > 0.0 or res.output_tokens > 0
        if not res.ok:
            res.error = "no tokens received"
        elif cfg.ignore_eos and res.output_tokens > req.output_len:
            # more tokens than asked for is a server bug (a stream that repeated tokens), and would inflate tok/s
            res.ok = False
            res.error = f"the server counted {res.output_tokens} completion tokens for max_tokens {req.output_len}"
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return res


def _pcts(xs: list[float], name: str) -> dict[str, float]:
    """mean / median / p90 / p99 in milliseconds (nearest-rank on the sorted samples)."""
    if not xs:
        return {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"p90_{name}_ms": 0.0, f"p99_{name}_ms": 0.0}
    s = sorted(xs)

    def pct(p: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))] * 1000

    return {f"mean_{name}_ms": sum(s) / len(s) * 1000, f"median_{name}_ms": pct(50),
            f"p90_{name}_ms": pct(90), f"p99_{name}_ms": pct(99)}


def summarize(cfg: BenchConfig, results: list[RequestResult], duration: float) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    tpots = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    summary: dict[str, Any] = {
        "config": {k: (None if isinstance(v, float) and math.isinf(v) else v)
                   for k, v in asdict(cfg).items() if k != "api_key"},
        "completed": len(ok), "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:5],
        "duration_s": duration, "total_input_tokens": in_tok, "total_output_tokens": out_tok,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "input_throughput": in_tok / duration if duration > 0 else 0.0,
        "output_throughput": out_tok / duration if duration > 0 else 0.0,
        "total_token_throughput": (in_tok + out_tok) / duration if duration > 0 else 0.0,
    }
    summary.update(_pcts([r.ttft for r in ok], "ttft"))
    summary.update(_pcts(tpots, "tpot"))
    summary.update(_pcts([x for r in ok for x in r.itl], "itl"))
    summary.update(_pcts([r.e2e for r in ok], "e2e"))
    return summary


async def run_benchmark(cfg: BenchConfig) -> dict[str, Any]:
    requests = make_requests(cfg)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    conns = cfg.max_concurrency or cfg.num_prompts
    limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
    async with httpx.AsyncClient(base_url=cfg.base_url, headers=headers, timeout=cfg.timeout_s,
                                 limits=limits) as client:
        model = cfg.model
        if model is None:
            resp = await client.get("/v1/models")
            resp.raise_for_status()
            model = resp.json()["data"][0]["id"]
        sem = asyncio.Semaphore(conns)
        rng = random.Random(cfg.seed + 1)

        async def limited(req: BenchRequest) -> RequestResult:
            async with sem:
                return await _one(client, cfg, model, req)

        tasks = []
        counters = await read_counters(client)
        start = time.perf_counter()
        for req in requests:
            tasks.append(asyncio.create_task(limited(req)))
            if not math.isinf(cfg.request_rate):
                await asyncio.sleep(rng.expovariate(cfg.request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
        server_side = breakdown(counters, await read_counters(client), duration)
    summary = summarize(cfg, list(results), duration)
    if server_side is not None:
        summary["server"] = server_side
    return summary


def format_report(s: dict[str, Any]) -> str:
    lines = ["============ Serving Benchmark Result ============"]

    def row(label: str, value: Any, fmt: str = "{:.2f}") -> None:
        lines.append(f"{label:<40}{fmt.format(value):>10}")

    row("Successful requests:", s["completed"], "{}")
    row("Failed requests:", s["failed"], "{}")
    row("Benchmark duration (s):", s["duration_s"])
    row("Total input tokens:", s["total_input_tokens"], "{}")
    row("Total generated tokens:", s["total_output_tokens"], "{}")
    row("Request throughput (req/s):", s["request_throughput"])
    row("Output token throughput (tok/s):", s["output_throughput"])
    row("Total token throughput (tok/s):", s["total_token_throughput"])
    for key, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                       ("itl", "Inter-token Latency"), ("e2e", "End-to-end Latency")):
        lines.append(f"{'-' * 15}{title}{'-' * 15}")
        for stat in ("mean", "median", "p90", "p99"):
            row(f"{stat.capitalize()} {key.upper()} (ms):", s[f"{stat}_{key}_ms"])
    if s.get("server") is not None:
        lines.extend(format_breakdown(s["server"]))
    for err in s["errors"]:
        lines.append(f"error: {err}")
    lines.append("=" * 50)
    return "\n".join(lines)
