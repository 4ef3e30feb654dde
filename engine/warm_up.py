"""A throwaway request run through the engine before it serves anyone, so the first user's request does not pay
for what any first request pays: the instruction streams of its step shapes (a Python build of ~0.3 s per new
shape on the cuda backend), the CUDA modules' first launches, the sampling kernel's setup. Measured on an H200
serving the 1B shape: the first request's time to first token was 5.8 s against 79 ms for the next ones.

The request is a prompt of `prompt_len` tokens (the prompt chunks at each block-table bucket up to that length),
then a run of decode steps greedy and one sampled step, so the shapes of a typical first request exist before it
arrives; and the same for several requests at once, at each concurrency of WARM_UP_CONCURRENCY up to the engine's
max_num_seqs: a step of more than 8 tokens runs padded to a bucketed count of sequences (engine/cuda/step_padding.py
pads to bucket_up(n + 1)), so concurrency bucket - 1 builds that bucket's shapes (measured on an H200: 32 clients'
first pass through a server got 1 139 output tok/s against 2 572 once their shapes existed). At each concurrency the
last greedy request arrives once the others decode, as a server's requests do: the step that prefills it beside their
decodes (a step shape of its own, the one every arrival at that concurrency meets) is built too. Other prompt lengths
and concurrencies run padded in a compiled larger shape's stream until they recur (engine/cuda/stream_hosting.py): the
warm-up runs inside Backend.warming_up, which compiles every shape the warm-up meets (no hosting) and, at its end,
hosts for any later shape: the most sequences a step has, at each token bucket up to the largest step. The engine's
counters are reset after.
"""
from __future__ import annotations

import time
from typing import Any

WARM_UP_PROMPT_LEN = 128  # a typical chat prompt; its chunks cover the block-table buckets up to it
# Requests at once: 1..8 decode unpadded (one shape each; the common ones here), more are padded to a bucket of
# bucket_up(n + 1) sequences, which n = bucket - 1 reaches; and every seat taken (warm_up adds max_num_seqs): its
# decode step and the step that prefills a newcomer beside max_num_seqs - 1 decodes, a serving engine's usual steps
# under load (an H200 server with 128 seats compiled three such shapes while serving, 0.3-0.8 s each).
WARM_UP_CONCURRENCY = (1, 2, 4, 8, 11, 15, 23, 31, 47, 63, 95, 127, 191, 255)
WARM_UP_ID = "__warm_up__"


def warm_up(engine: Any, prompt_len: int = WARM_UP_PROMPT_LEN,
            concurrency: tuple[int, ...] = WARM_UP_CONCURRENCY) -> float:
    """Run the throwaway requests to completion on `engine` (an LLMEngine with nothing queued), `c` at once for each
    c of `concurrency` up to its max_num_seqs, and max_num_seqs at once; returns seconds."""
    from engine.sampling_params import SamplingParams

    if engine.has_unfinished_requests():
        raise RuntimeError("warm_up: the engine already has requests")
    start = time.monotonic()
    n = max(1, min(prompt_len, engine.max_model_len - 2 * engine.engine_config.decode_steps - 2))
    greedy = SamplingParams(max_tokens=engine.engine_config.decode_steps + 2, ignore_eos=True, temperature=0.0)
    sampled = SamplingParams(max_tokens=2, ignore_eos=True, temperature=1.0, top_p=0.9, top_k=20, seed=0)
    # From the most requests at once to one: the streams built last are the most recently used when serving starts,
    # so a stream cache smaller than the warm-up's shapes (the 1B's warm-up builds 37 against a cache of 32:
    # dev/serve_shapes.py) drops the highest concurrency's shapes, not those of one request (its prompt and its
    # decode: a lone user's first token would wait for their compile).
    sched = engine.scheduler.config
    with engine.backend.warming_up(sched.max_num_batched_tokens, sched.max_num_seqs,
                                   -(-sched.max_model_len // sched.page_size)):
        seats = engine.engine_config.max_num_seqs
        for c in sorted({min(c, seats) for c in concurrency} | {seats}, reverse=True):
            for suffix, params in (("greedy", greedy), ("sampled", sampled)):
                _run_at_once(engine, c, suffix, params, n)
    engine.reset_counters()
    return time.monotonic() - start


def _run_at_once(engine: Any, c: int, suffix: str, params: Any, n: int) -> None:
    """`c` throwaway requests of `n`-token prompts to completion; greedy ones: the last arrives once the others
    decode."""
    vocab = engine.config.vocab_size
    ids = [f"{WARM_UP_ID}{c}-{suffix}-{r}" for r in range(c)]
    late = ids[-1] if suffix == "greedy" and c > 1 else None  # arrives once the others decode
    for r, rid in enumerate(ids):  # distinct prompts: no request is a copy of another
        if rid != late:
            engine.add_request(rid, {"prompt_token_ids": _prompt(n, r, vocab)}, params)
    started: set[str] = set()
    while engine.has_unfinished_requests():
        started.update(out.request_id for out in engine.step() if out.outputs[0].token_ids)
        if late is not None and started >= set(ids[:-1]):
            engine.add_request(late, {"prompt_token_ids": _prompt(n, len(ids) - 1, vocab)}, params)
            late = None


def _prompt(n: int, r: int, vocab: int) -> list[int]:
    return [1 + (i + 7 * r) % (vocab - 1) for i in range(n)]
