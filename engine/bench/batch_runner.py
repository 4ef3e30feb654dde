"""The product rows of `megakernel bench --batch N`: N requests decoded together through `LLMEngine` (what the
server does with N concurrent clients), timed over a window in which all N are decoding.

The N prompts are the bench's prompt and its rotations (N distinct prompts of one length). Each request may
generate more than `new_tokens`, so none finishes inside the window: the window opens when the last request
has its first token (every prompt is computed) and closes once every request has `new_tokens - 1` more; seconds
per step = window / (decode tokens in the window / N). Prefill is outside the window, as in the
batch-1 rows.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from engine.bench.generate_runner import bench_llm, bench_params
from engine.bench.timing import synchronize
from engine.engine_config import EngineConfig
from models.llama.config import LlamaConfig
from models.llama.weights import LlamaWeights


def rotations(prompt: Sequence[int], n: int, lengths: Sequence[int] = ()) -> list[list[int]]:
    """n distinct prompts: the prompt rotated by 0, 1, ... (as distinct as its tokens), of the prompt's length or of
    `lengths` (the prompt repeated where one is longer)."""
    p = list(prompt)
    sizes = list(lengths) or [len(p)] * n
    return [[p[(i + k) % len(p)] for k in range(sizes[i])] for i in range(n)]


def batch_runner(weights: LlamaWeights, config: LlamaConfig, prompt_ids: list[int], new_tokens: int,
                 batch: int, backend: str = "cuda", sampled: bool = False,
                 lengths: Sequence[int] = (), kernel_options: tuple[str, ...] = ()) -> tuple[Sequence[int], float]:
    """An engine runner (engine/bench/engines.py) for `batch` sequences (of the prompt's length, or of `lengths`):
    (request 0's first `new_tokens` tokens, seconds per decode step of the whole batch)."""
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
        # Warm-up: the same window once, so every step shape the timed window meets (prompt chunks mixed with
        # decodes, then the runs of decodes at each context bucket) has its instruction stream built and cached: a
        # shape's first build takes a few hundred ms on the host, which a shorter warm-up left inside the window.
        _window(llm.engine, prompts, params, new_tokens, weights.device)
        return _window(llm.engine, prompts, params, new_tokens, weights.device)


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
