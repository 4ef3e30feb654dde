"""A step whose shape has no compiled stream yet runs padded in a compiled stream of a larger shape.

Compiling the stream of a large step takes the engine thread 0.3-1.2 s (tens of thousands of instructions built in
Python), and a server's traffic meets shapes its warm-up did not build: a few prompt chunks beside many decodes,
most of them once or twice (dev/serve_shapes.py). A stream compiled for T' tokens over S' sequences runs any step of
fewer tokens and sequences padded with dummy sequences (step_padding.py can_pad) whose block tables fit its width:
the real sequences' results are those of their own shape's stream, because KV splits and query parts are cut at
run time from the step args (a stream's cuts change how fast a step runs, never what it computes). A padded step
costs GPU time for its extra tokens, a compile costs the whole server a stall, so a shape is compiled only once it
recurs (`compile_after` hosted steps), and only hosts of at most `max_growth` times its tokens are used; a host of
the step's own counts and KV splits (its tables only wider) costs nothing a compile would save and is kept for good.
The warm-up compiles hosts at every token bucket (Backend.warming_up, step_padding.py host_ladder), so a host is at
most one bucket (1.5x) larger in tokens. With `builds` (`--kernel-option background_builds=1`) a recurring shape
is compiled by a worker process while its steps stay hosted, and adopted at its next step once done
(background_builds.py).
Measured (H200, 1B, a fresh server, 32 clients of 128 in / 128 out): 4 750 output tok/s and a median TTFT of 154 ms
against 740 tok/s and 2.99 s with hosting off (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

from engine.cuda.background_builds import BackgroundBuilds
from engine.cuda.step_padding import can_pad, dummy_step, host_ladder, pad_batch
from engine.scheduler.compiler.step_builder_cache import CompiledStream, StreamCache
from engine.scheduler.compiler.stream_payload import StreamPayload, compile_payload, from_payload
from engine.scheduler.compiler.stream_store import StreamStore
from models.llama.step_batch import StepBatch

# A shape hosted this many times gets its own stream at its next step: a compile (~0.5 s) is worth it once the
# padded steps it replaces would cost about as much (the CPU model of 32 staggered clients, dev/serve_shapes.py:
# 4 compiles and 46 hosted steps at 8 with growth 8, 9 and 31 at 4 with growth 4).
DEFAULT_COMPILE_AFTER = 8
# A host of more tokens than this many times the step's padded count is not used: the padded step would cost more
# than compiling a small shape (whose stream has few instructions) does.
DEFAULT_MAX_GROWTH = 8
# The shapes counted (asked for while hosted) are forgotten past this many: a server's traffic meets a few hundred.
MAX_COUNTED_SHAPES = 4096


@dataclass
class StreamHosting:
    """Which compiled stream a step runs in (one of many tokens, or of several sequences): its own shape's, or a
    host's (module docstring).
    `spare_page`: the KV page dummy sequences use (step_padding.py)."""

    spare_page: int
    compile_after: int = DEFAULT_COMPILE_AFTER
    max_growth: int = DEFAULT_MAX_GROWTH
    asked: dict[tuple[int, ...], int] = field(default_factory=dict)  # hosted steps per uncompiled shape
    paused: bool = False  # every step in its own shape's stream (the warm-up: Backend.warming_up)
    # A recurring shape's stream compiled by a worker process while its steps stay hosted (background_builds.py);
    # None: compiled on the engine thread at its next step.
    builds: BackgroundBuilds[StreamPayload] | None = None

    def __post_init__(self) -> None:
        if self.compile_after < 0 or self.max_growth < 1:
            raise ValueError(f"StreamHosting: compile_after >= 0 and max_growth >= 1, got {self}")

    @contextmanager
    def pause(self) -> Iterator[None]:
        was, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = was

    @contextmanager
    def warming_up(self, run: Callable[[StepBatch], object], max_tokens: int, max_seqs: int, max_table_pages: int,
                   kernel_max_tokens: int | None = None) -> Iterator[None]:
        """Backend.warming_up for a backend that hosts with this: every step in its own shape's stream while open,
        then `run` (the backend's step) of a dummy step at each of host_ladder's counts, the hosts of later shapes."""
        with self.pause():
            yield
            for tokens, seqs in host_ladder(max_tokens, max_seqs, kernel_max_tokens):
                run(dummy_step(tokens, seqs, max_table_pages, self.spare_page))

    def place(self, cache: StreamCache, key: tuple[int, ...], step: StepBatch, padded: StepBatch,
              usable: Callable[[CompiledStream], bool]) -> tuple[CompiledStream, StepBatch] | None:
        """(host, `step` padded to the host's counts, its step args patched) where `padded` (`step` padded to its
        bucketed shape; `key`: its shape key in `cache`) has no stream in `cache` and a `usable` host there takes it;
        None: `padded` runs in its own shape's stream (compiled now if it is not)."""
        if self.paused or key in cache:
            return None
        if self.builds is not None:
            built = self.builds.take(key)
            if isinstance(built, StreamPayload):
                cache.adopt(key, from_payload(built, cache.dims))
                return None
            if built is not None:  # the worker's compile failed: this thread compiles, and raises what it raises
                return None
        host = smallest_host(cache.streams(), step, padded.num_tokens * self.max_growth, usable)
        if host is None:
            return None
        # A host of the padded step's own counts and KV splits (its tables only wider) costs nothing a compile would
        # save; any other is counted (a long context's splits matter: 3.5x a step's time at 32k, docs/PERFORMANCE.md)
        if host.key[:2] != key[:2] or seq_splits(host.key) != seq_splits(key):
            asked = self.asked.get(key, 0) + 1
            if asked > self.compile_after:
                self.asked.pop(key, None)
                if self.builds is None:
                    return None
                # hosted until the worker is done, which compiles from its own copy of the step (CPU tensors) and
                # writes the stream store's file, where there is one
                job = partial(compile_payload, cache.dims, copy.deepcopy(padded), cache.page_size, cache.params,
                              cache.device)
                if isinstance(cache.store, StreamStore):
                    job = partial(cache.store.compile_and_save, key, job)
                self.builds.submit(key, job)
            else:
                if len(self.asked) >= MAX_COUNTED_SHAPES:
                    self.asked.clear()
                self.asked[key] = asked
        run = pad_batch(step, self.spare_page, counts=(host.shape.num_tokens, host.shape.num_seqs))
        return cache.host(host, run), run


def may_host(step: StepBatch, pads: bool) -> bool:
    """Whether a single step may run hosted: one that runs padded (`pads`), or one of several sequences (a few decodes:
    a host's dummy rows cost little); a lone sequence's few tokens keep their own stream (batch-1 decode's kernel
    variants and fused attention)."""
    return pads or step.num_seqs > 1


def seq_splits(key: tuple[int, ...]) -> tuple[int, ...]:
    """Each sequence's KV splits in a stream key (step_builder_cache.shape_key: (T, S, pages, uniform splits) or
    (T, S, pages, most splits, per-sequence splits...))."""
    return key[4:] if len(key) > 4 else (key[3],) * key[1]


def smallest_host(streams: list[CompiledStream], step: StepBatch, max_tokens: int,
                  usable: Callable[[CompiledStream], bool]) -> CompiledStream | None:
    """The `usable` stream of the fewest tokens (then sequences, then table pages) that runs `step` padded: as many
    tokens and sequences or more (can_pad), at most `max_tokens` tokens, tables at least as wide."""
    pages = int(step.block_tables.shape[1])
    fits = [cs for cs in streams
            if cs.shape.num_tokens <= max_tokens and cs.shape.max_pages >= pages and usable(cs)
            and can_pad(step.num_tokens, step.num_seqs, cs.shape.num_tokens, cs.shape.num_seqs)]
    return min(fits, key=lambda cs: (cs.shape.num_tokens, cs.shape.num_seqs, cs.shape.max_pages), default=None)
