"""The bench's correctness column: per row, the largest |logprob − fp32 reference| of the tokens that row
produced, teacher-forced (each step is fed the row's own previous tokens), so rows are compared on what they
computed rather than on greedy tokens, which random weights make near-ties.

The reference is the torch backend on an fp32 copy of the bench's weights. A row is re-run through the backend
that computed it: the megakernel rows through the cuda backend with the engine's defaults (the kernel
`LLM.generate` launches), every other row (the bf16 torch baselines, `engine-torch`) through the torch backend
on the bench's weights, the arithmetic the eager baseline does. Untimed; after every timed run.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence

import torch

from engine.backends.base import Backend
from engine.bench.baselines import RunResult
from engine.bench.engines import SAMPLED_SUFFIX
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights, to_state_dict, weights_from_state_dict

PAGE_SIZE = 16
MEGAKERNEL_PREFIX = "megakernel"  # rows the cuda backend computed
# Prompt tokens per prefill step of the check: the fp32 reference's attention holds a [heads, chunk, context] score
# matrix, which for a 32 000-token prompt in one step would be 131 GB (1B shape).
PREFILL_CHUNK = 1024


def teacher_forced_logits(backend: Backend, prompt: Sequence[int], tokens: Sequence[int],
                          page_size: int = PAGE_SIZE, prefill_chunk: int = PREFILL_CHUNK) -> Iterator[torch.Tensor]:
    """The logits [V] `backend` gives before each of `tokens`, after the prompt and the tokens before it (prefill
    in chunks of at most `prefill_chunk` tokens that the backend takes, then one decode step per token; its cache's
    pages 0, 1, ... in order)."""
    table = [list(range(-(-(len(prompt) + len(tokens)) // page_size)))]
    limit = min(backend.max_tokens_per_step or len(prompt), prefill_chunk)
    logits = None
    for begin in range(0, len(prompt), limit):
        chunk = list(prompt[begin:begin + limit])
        logits = backend.forward(StepBatch.build([chunk], [begin], table, device=backend.batch_device,
                                                 page_size=page_size))
    for i, tok in enumerate(tokens):
        assert logits is not None
        yield logits[0]
        if i + 1 < len(tokens):
            logits = backend.forward(StepBatch.build([[tok]], [len(prompt) + i], table, device=backend.batch_device,
                                                     page_size=page_size))


def teacher_forced(backend: Backend, prompt: Sequence[int], tokens: Sequence[int]) -> torch.Tensor:
    """float64 [len(tokens)]: the log-probability `backend` gives each of `tokens`, teacher-forced."""
    return teacher_forced_scores(backend, prompt, tokens)[0]


def teacher_forced_scores(backend: Backend, prompt: Sequence[int],
                          tokens: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 [len(tokens)] twice, teacher-forced: the log-probability `backend` gives each of `tokens`, and the
    largest log-probability of any token at that step."""
    lp, best = [], []
    for logits, tok in zip(teacher_forced_logits(backend, prompt, tokens), tokens):
        row = torch.log_softmax(logits.double(), dim=-1)
        lp.append(float(row[tok]))
        best.append(float(row.max()))
    return torch.tensor(lp, dtype=torch.float64), torch.tensor(best, dtype=torch.float64)


def _pages(prompt: Sequence[int], runs: Sequence[RunResult]) -> int:
    longest = max(len(r.tokens) for r in runs)
    return -(-(len(prompt) + longest) // PAGE_SIZE) + 1


def logprob_errors(weights: LlamaWeights, prompt: Sequence[int], runs: Sequence[RunResult],
                   progress: Callable[[str], None], regrets: dict[str, float] | None = None) -> dict[str, float]:
    """Row name -> max |logprob - fp32 reference| over its tokens, for every ok row with tokens whose backend can
    run here (a megakernel row needs the cuda backend). `regrets`, when given, receives for every greedy row (not
    `-sampled`) the largest gap between the reference's best logprob and its logprob of the row's token, over the
    row's steps: 0 where the row chose the reference's argmax, a near-tie's small gap on random weights, and far more
    where the row's own computation went wrong, whatever ran it (batched or mixed-length steps included: the check
    re-runs only sequence 0, alone, so the errors column speaks of the backend, this one of the timed row)."""
    from engine.backends.torch_backend import TorchBackend

    runs = [r for r in runs if r.status == "ok" and r.tokens]
    if not runs:
        return {}
    cfg, device = weights.config, weights.device
    pages = _pages(prompt, runs)
    progress("logprob check: the fp32 reference, teacher-forced on each row's tokens")
    fp32 = weights_from_state_dict(cfg, to_state_dict(weights, include_lm_head=not cfg.tie_word_embeddings),
                                   torch.float32, device)
    reference = TorchBackend(fp32, num_pages=pages, page_size=PAGE_SIZE, device=device)
    scores = {r.tokens: teacher_forced_scores(reference, prompt, r.tokens) for r in runs}
    ref = {tokens: lp for tokens, (lp, _best) in scores.items()}
    if regrets is not None:
        for r in runs:
            if not r.name.endswith(SAMPLED_SUFFIX):
                lp, best = scores[r.tokens]
                regrets[r.name] = float((best - lp).max())
    del reference, fp32
    _free(device)
    errors: dict[str, float] = {}
    groups = {True: [r for r in runs if r.name.startswith(MEGAKERNEL_PREFIX)],
              False: [r for r in runs if not r.name.startswith(MEGAKERNEL_PREFIX)]}
    for on_cuda, rows in groups.items():
        if not rows:
            continue
        backend = _row_backend(on_cuda, weights, pages)
        if backend is None:
            continue
        progress(f"logprob check: {', '.join(r.name for r in rows)}")
        cache: dict[tuple[int, ...], float] = {}
        for r in rows:
            if r.tokens not in cache:
                cache[r.tokens] = float((teacher_forced(backend, prompt, r.tokens) - ref[r.tokens]).abs().max())
            errors[r.name] = cache[r.tokens]
        del backend
        _free(device)
    return errors


def _row_backend(on_cuda: bool, weights: LlamaWeights, pages: int) -> Backend | None:
    if not on_cuda:
        from engine.backends.torch_backend import TorchBackend
        return TorchBackend(weights, num_pages=pages, page_size=PAGE_SIZE, device=weights.device)
    from engine.backends import has_sm90_gpu
    if weights.device.type != "cuda" or not has_sm90_gpu():
        return None
    from engine.backends.cuda_backend import CudaBackend
    return CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
