"""CPU only: a backend stand-in whose steps take the time a GPU's would, for dev/serve_ceiling.py. A step's time comes
from its padded token count (engine/cuda/step_padding.py, as the cuda backend pads) on a piecewise-linear curve through
measured points (STEP_MS_H200_1B: the 1B shape's batched decode steps and a 2 048-token prefill on an H200,
docs/PERFORMANCE.md). A single step sleeps its time (the host waits for it, as for a synchronised launch); a run of
decode steps keeps a device clock: its steps are queued ahead of the host and hand their ids back every READBACK_STEPS
steps, the host at most LOOKAHEAD_CHUNKS chunks behind, as engine/cuda/device_decode_run.py does, so the host's work
per chunk overlaps the later steps and the device idles only when the host falls behind."""
from __future__ import annotations

import bisect
import time
from collections.abc import Sequence

import torch

from engine.backends.base import Backend, OnRecords
from engine.cuda.device_decode_run import LOOKAHEAD_CHUNKS, READBACK_STEPS
from engine.cuda.step_padding import padded_counts
from engine.run_stops import RunStops
from engine.sampling.run_sampler import RunSampler
from models.llama.step_batch import StepBatch

# (padded tokens of a step, ms) on an H200, 1B shape: decode steps of 1/16/32/64 sequences (one run of the build whose
# decode attention folds by (KV page, head): docs/results/2026-11-29_h200_attention-head-units-serve-seats.json
# `faster_fold_and_head_units_rule`), of 128 sequences and one 2 048-token prompt (earlier builds:
# 2026-11-29_h200_tile-stream-probes.json, 2026-11-29_h200_packed-tile-pages.json)
STEP_MS_H200_1B: tuple[tuple[int, float], ...] = ((1, 0.78), (16, 1.61), (32, 1.88), (64, 2.50), (128, 3.74),
                                                  (2048, 21.5))
PADDED_OVER = 16  # steps of more tokens than one token group run padded (the 1B's)
FAVOURED_TOKEN = 7


def step_ms(tokens: int, seqs: int, points: Sequence[tuple[int, float]] = STEP_MS_H200_1B) -> float:
    """The modelled time of a step of `tokens` tokens over `seqs` sequences."""
    padded = padded_counts(tokens, seqs)[0] if tokens > PADDED_OVER else tokens
    xs = [p[0] for p in points]
    i = min(max(bisect.bisect_left(xs, padded), 1), len(xs) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (padded - x0) / (x1 - x0)


def simulate_device(backend: Backend, vocab: int) -> None:
    """Make `backend` (a torch backend of a tiny checkpoint) take the modelled times and return logits favouring
    FAVOURED_TOKEN, with runs of decode steps queued ahead of the host."""

    def forward(batch: StepBatch) -> torch.Tensor:
        time.sleep(step_ms(batch.num_tokens, batch.num_seqs) / 1e3)
        logits = torch.zeros(batch.num_seqs, vocab)
        logits[:, FAVOURED_TOKEN] = 1.0
        return logits

    def decode_steps(batch: StepBatch, steps: int, page_size: int, on_records: OnRecords,
                     sampler: RunSampler | None = None, stops: RunStops | None = None) -> int:
        if sampler is not None:  # the sampled path as the base class runs it (greedy serving is what this models)
            return Backend.decode_steps(backend, batch, steps, page_size, on_records, sampler, stops)
        dt = step_ms(batch.num_seqs, batch.num_seqs) / 1e3
        chunks = -(-steps // READBACK_STEPS)
        done_at: list[float] = []  # device time each chunk ends
        delivered_at: list[float] = []  # host time each chunk was handed over
        start = time.monotonic()
        last, k = chunks - 1, 0
        while k <= last:
            n = min(READBACK_STEPS, steps - k * READBACK_STEPS)
            # chunk k is launched once the host has handed over chunk k - LOOKAHEAD_CHUNKS - 1
            launch = delivered_at[k - LOOKAHEAD_CHUNKS - 1] if k > LOOKAHEAD_CHUNKS else start
            done_at.append(max(done_at[-1] if done_at else start, launch) + n * dt)
            wait = done_at[k] - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            ids = torch.full((n, batch.num_seqs), FAVOURED_TOKEN, dtype=torch.int64)
            if not on_records({"ids": ids}) and last == chunks - 1:
                last = min(last, k + LOOKAHEAD_CHUNKS)  # the chunks already queued still run and are handed over
            delivered_at.append(time.monotonic())
            k += 1
        return min(steps, (last + 1) * READBACK_STEPS)

    backend.forward = forward  # type: ignore[method-assign]
    backend.decode_steps = decode_steps  # type: ignore[method-assign]
