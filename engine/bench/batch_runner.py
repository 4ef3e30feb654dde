"""The product rows of `megakernel bench --batch N`: N requests decoded together through `LLMEngine` (what the
server does with N concurrent clients), timed over a window in which all N are decoding.

The N prompts are the bench's prompt and its rotations (N distinct prompts of one length). Each request may
generate more than `new_tokens`, so none finishes inside the window: the window opens when the last request
has its first token (every prompt is computed) and closes once every request has `new_tokens - 1` more; seconds
per step = window / (decode tokens in the window / N). Prefill is outside the window, as in the
batch-1 rows.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

import torch

from engine.bench.generate_runner import bench_llm, bench_params
from engine.bench.timing import synchronize
from engine.engine_config import EngineConfig
from models.llama.config import LlamaConfig
from models.llama.weights import LlamaWeights

log = logging.getLogger(__name__)
T = TypeVar("T")

# Warm-up windows run before the timed ones, until one compiles no stream. One is not always enough: a shape the
# first window ran hosted in a larger stream (engine/cuda/stream_hosting.py) is compiled once it recurs, which can
# fall in the next window; a compile inside the timed window added ~0.2-0.9 s to it (batch 96-128 on an H200 read
# 4.1-7.3 ms/step from one window to the next).
MAX_WARM_WINDOWS = 4
# Timed windows after the warm-up; the row is their median (each window's time in the row's notes). One window now
# and then reads 1.3-1.9x the others with no compile in it (H200, batch 64 and 128 greedy: 5.33 against 2.72 ms/step
# in the same process's next round, docs/results/2026-11-28_h200_ring-head-split-ab-l2-microbench.json).
TIMED_WINDOWS = 3


def rotations(prompt: Sequence[int], n: int, lengths: Sequence[int] = ()) -> list[list[int]]:
    """n distinct prompts: the prompt rotated by 0, 1, ... (as distinct as its tokens), of the prompt's length or of
    `lengths` (the prompt repeated where one is longer)."""
    p = list(prompt)
    sizes = list(lengths) or [len(p)] * n
    return [[p[(i + k) % len(p)] for k in range(sizes[i])] for i in range(n)]


def batch_runner(weights: LlamaWeights, config: LlamaConfig, prompt_ids: list[int], new_tokens: int,
                 batch: int, backend: str = "cuda", sampled: bool = False,
                 lengths: Sequence[int] = (), kernel_options: tuple[str, ...] = ()
                 ) -> tuple[Sequence[int], float, tuple[float, ...]]:
    """An engine runner (engine/bench/engines.py) for `batch` sequences (of the prompt's length, or of `lengths`):
    (request 0's first `new_tokens` tokens, seconds per decode step of the whole batch: the median of TIMED_WINDOWS
    windows, each window's)."""
    if new_tokens < 2:
        raise ValueError("the batch rows time decode steps after the first token: --new-tokens must be >= 2")
    prompts = rotations(prompt_ids, batch, lengths)
    longest = max(len(p) for p in prompts)
    # Room for the requests admitted first to keep decoding until the last one has its new_tokens (a run of decode
    # steps may overshoot by EngineConfig.decode_steps).
    spare = sum(len(p) for p in prompts) + new_tokens + 2 * EngineConfig.decode_steps
    max_len = min(config.max_position_embeddings, longest + new_tokens + spare + 1)
    params = bench_params(sampled, max_tokens=max_len - longest - 1)
    with bench_llm(weights, backend, max_num_seqs=batch, max_model_len=max_len, kernel_options=kernel_options) as llm:
        # Warm-up: the same window, so every step shape the timed window meets (prompt chunks mixed with decodes,
        # then the runs of decodes at each context bucket) has its instruction stream built and cached: a shape's
        # first build takes a few hundred ms on the host, which a shorter warm-up left inside the window.
        window = partial(_window, llm.engine, prompts, params, new_tokens, weights.device)
        results, compiled = warm_then_time(window, lambda: llm.engine.get_stats().stream_compiles)
        if compiled:
            log.warning("batch %d: the timed windows compiled %d step streams (their times include them)", batch,
                        compiled)
        return median_window(results)


def warm_then_time(window: Callable[[], T], compiles: Callable[[], int],
                   timed: int = TIMED_WINDOWS) -> tuple[list[T], int]:
    """`window` run until a run compiles no stream (at most MAX_WARM_WINDOWS warm-up runs), then `timed` more times:
    (those runs' results, the streams they compiled)."""
    for _ in range(MAX_WARM_WINDOWS):
        before = compiles()
        window()
        if compiles() == before:
            break
    before = compiles()
    results = [window() for _ in range(timed)]
    return results, compiles() - before


def median_window(results: Sequence[tuple[list[int], float]]) -> tuple[list[int], float, tuple[float, ...]]:
    """(the first window's tokens, the median of the windows' seconds per step, each window's seconds)."""
    seconds = tuple(s for _, s in results)
    return results[0][0], sorted(seconds)[len(seconds) // 2], seconds


def _window(engine, prompts: list[list[int]], params, new_tokens: int,  # noqa: ANN001
            device: torch.device) -> tuple[list[int], float]:
    ids = [f"bench-{i}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts):
        engine.add_request(rid, {"prompt_token_ids": p}, params)
    tokens: dict[str, list[int]] = {rid: [] for rid in ids}
    start: float | None = None
    at_start: list[int] = []
    try:
        while True:
            if not engine.has_unfinished_requests():
                raise RuntimeError("the requests finished before the window closed")
            for out in engine.step():
                tokens[out.request_id] = list(out.outputs[0].token_ids)
                if out.finished and out.outputs[0].finish_reason != "length":
                    raise RuntimeError(f"request {out.request_id} ended early: {out.outputs[0].finish_reason}")
            counts = [len(t) for t in tokens.values()]
            if start is None:
                if min(counts) >= 1:  # every prompt computed: the window opens (a step may bring many tokens)
                    synchronize(device)
                    start, at_start = time.perf_counter(), counts
                continue
            if min(c - c0 for c, c0 in zip(counts, at_start)) >= new_tokens - 1:
                synchronize(device)
                elapsed = time.perf_counter() - start
                steps = (sum(counts) - sum(at_start)) / len(prompts)
                return tokens[ids[0]][:new_tokens], elapsed / steps
    finally:
        for rid in ids:
            engine.abort(rid)
