"""Compile a step (plan -> DAG -> costs -> schedule) for a target device and cache compiled streams per
batch shape.

Decode steps of one batch reuse the same stream: the cache key is (T, S, max_pages bucket, attention
splits), and only the step-args buffer is patched between steps. Block-table widths are bucketed to
powers of two from MIN_TABLE_PAGES up (tables are -1 padded) so a growing context rebuilds only O(log) times,
and never below a thousand tokens.
"""
from __future__ import annotations

import gc
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import torch

from engine.instructions.cost import InstrCost
from engine.instructions.format import NUM_OPERANDS, W_OPCODE, W_OPERANDS
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.registry import OPCODES
from engine.instructions.step_args import encode_step_args
from engine.scheduler.compiler.cost_model import CostParams, cost_inputs, time_ns
from engine.scheduler.compiler.policies import Schedule, make_schedule
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder import Stream, build_stream
from engine.scheduler.compiler.attention_cuts import num_attn_splits, step_seq_splits
from engine.scheduler.compiler.step_builder_splits import Plan, make_plan
from engine.scheduler.compiler.target import TargetDevice
from models.llama.step_batch import StepBatch

# One INFO line per stream compiled (a server logs them: which step shapes its traffic meets for the first time, and
# what each costs the engine thread).
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildParams:
    """How streams are compiled (placement policy, split knobs, cost-model figures), for any target device."""

    policy: str = "rr"
    split: SplitParams = field(default_factory=SplitParams)
    cost: CostParams = field(default_factory=CostParams)

    @staticmethod
    def of(policy: str = "rr", **split_kw: object) -> BuildParams:
        """`policy` with SplitParams(**split_kw) and the default cost figures."""
        return BuildParams(policy, SplitParams(**split_kw))  # type: ignore[arg-type]


@dataclass
class CompiledStream:
    stream: Stream  # its words carry each instruction's cost estimate (word W_COST)
    device: TargetDevice
    schedule: Schedule
    costs: list[InstrCost]
    durations: np.ndarray  # predicted ns per instruction
    tensor: np.ndarray  # what the interpreter runs: static [num_sms, max_len, 32] / dynamic [N, 32]
    step_args: torch.Tensor  # int32, patched every step
    page_size: int
    build_ms: float
    key: tuple[int, ...] = ()  # its shape_key
    backend_state: object = None  # per-stream backend data (VM buffers + counters); dropped with the stream

    @property
    def shape(self) -> StepShape:
        return self.stream.shape

    @property
    def words(self) -> np.ndarray:
        return self.stream.words()

    def patch(self, batch: StepBatch) -> None:
        encode_step_args(batch, self.shape, self.page_size, out=self.step_args,
                         query_units=query_units(self.stream.plan))


def query_units(plan: Plan) -> int | None:
    """The query units a stream's step args deal out (None: it does not spread its attention)."""
    return plan.q_parts if plan.spread else None


def bucket(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


# The step args' block tables are at least this many pages wide (1 024 tokens at 16 per page): the width is part of a
# stream's shape, and without a floor a server's sequences growing from 8 to 9 and from 16 to 17 pages met each step
# shape again, each a compile on the engine thread (and the warm-up's short requests built streams of narrower
# tables than the ones served). A wider table costs 4 bytes per page per sequence in the step args, nothing else.
MIN_TABLE_PAGES = 64


def table_pages(batch: StepBatch) -> int:
    """The block-table width of `batch`'s stream: its widest table in a power-of-two bucket, MIN_TABLE_PAGES or
    more."""
    return max(MIN_TABLE_PAGES, bucket(int(batch.block_tables.shape[1])))


def shape_key(dims: ModelDims, batch: StepBatch, page_size: int, params: BuildParams,
              device: TargetDevice) -> tuple[int, ...]:
    max_pages = table_pages(batch)
    shape = StepShape(batch.num_tokens, batch.num_seqs, max_pages)
    ctx_pages = -(-int(batch.context_lens.max()) // page_size)
    key = (shape.num_tokens, shape.num_seqs, max_pages, num_attn_splits(dims, shape, params.split, device, ctx_pages))
    # each sequence's split count, where they differ, is part of the stream
    key += step_seq_splits(dims, shape, params.split, device, seq_context_pages(batch, page_size))
    return key


def seq_context_pages(batch: StepBatch, page_size: int) -> tuple[int, ...]:
    return tuple(-(-int(c) // page_size) for c in batch.context_lens.tolist())


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (as it was after). Compiling a large step creates tens of
    thousands of small objects, none of them in cycles, and the collections they set off (each walking every object of
    the process, torch's and the server's included) were 40 % of a 1B batch-32 step's 0.29 s compile on the CPU."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_stream(dims: ModelDims, batch: StepBatch, page_size: int, params: BuildParams,
                   device: TargetDevice) -> CompiledStream:
    with gc_paused():
        return _compile_stream(dims, batch, page_size, params, device)


def _compile_stream(dims: ModelDims, batch: StepBatch, page_size: int, params: BuildParams,
                    device: TargetDevice) -> CompiledStream:
    t0 = time.perf_counter()
    skey = shape_key(dims, batch, page_size, params, device)
    T, S, max_pages = skey[:3]
    shape = StepShape(T, S, max_pages)
    ctx_pages = -(-int(batch.context_lens.max()) // page_size)
    stream = build_stream(dims, shape, make_plan(dims, shape, params.split, device, ctx_pages,
                                                 seq_context_pages(batch, page_size)))
    inputs = cost_inputs(dims, shape, [int(c) for c in batch.context_lens], params.cost)
    # An instruction's cost depends on its opcode and operands only: the same blocks recur in every layer, so each
    # distinct (opcode, operands) row of the encoded stream is costed once.
    # (Rows compared as raw bytes: np.unique's axis=0 form took ten times as long.)
    keys = np.ascontiguousarray(stream.encoded()[:, [W_OPCODE, *range(W_OPERANDS, W_OPERANDS + NUM_OPERANDS)]])
    rows = keys.view(np.dtype((np.void, keys.dtype.itemsize * keys.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    unique_costs = [OPCODES.cost(stream.instrs[i], inputs) for i in first.tolist()]
    unique_dur = np.array([time_ns(c, params.cost, device) for c in unique_costs])
    inverse = inverse.reshape(-1)
    costs = [unique_costs[j] for j in inverse.tolist()]
    dur = unique_dur[inverse]
    stream.cost_ns = np.rint(dur).astype(np.int32)
    schedule = make_schedule(params.policy, stream.instrs, dur, params.cost, device)
    tensor = schedule.tensor(stream.words())
    step_args = encode_step_args(batch, shape, page_size, query_units=query_units(stream.plan))
    return CompiledStream(stream, device, schedule, costs, dur, tensor, step_args, page_size,
                          (time.perf_counter() - t0) * 1e3, skey)


@dataclass(frozen=True)
class StreamStats:
    """How often steps found their shape's stream compiled (hits), how often one was compiled or loaded from the
    stream store (misses: on the engine's thread, before the step could run), the host seconds those took, how many
    steps ran padded in a compiled stream of a larger shape instead (hosted: engine/cuda/stream_hosting.py), and how
    many streams were compiled off the engine thread meanwhile and adopted (background:
    engine/cuda/background_builds.py)."""
    hits: int = 0
    misses: int = 0
    build_seconds: float = 0.0
    hosted: int = 0
    background: int = 0

    def __add__(self, other: StreamStats) -> StreamStats:
        return StreamStats(self.hits + other.hits, self.misses + other.misses, self.build_seconds + other.build_seconds,
                           self.hosted + other.hosted, self.background + other.background)


class StreamFiles(Protocol):
    """Where compiled streams outlive the process (stream_store.py StreamStore)."""

    def load(self, key: tuple[int, ...], batch: StepBatch) -> CompiledStream | None: ...

    def save(self, key: tuple[int, ...], cs: CompiledStream) -> None: ...


class StreamCache:
    """Compiled streams keyed by batch shape; `get` patches the step args of a cached stream. With `store`, a shape
    not cached is loaded from disk where an earlier run compiled it, and a compiled one is written there."""

    def __init__(self, dims: ModelDims, page_size: int, params: BuildParams, device: TargetDevice,
                 capacity: int = 32, store: StreamFiles | None = None) -> None:
        self.dims, self.page_size, self.params, self.device = dims, page_size, params, device
        self.store = store
        self.capacity = capacity  # prefill chunks create many shapes: keep the most recently used
        self._streams: OrderedDict[tuple[int, ...], CompiledStream] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.hosted = 0
        self.background = 0  # streams compiled off the engine thread and adopted
        self.build_ms_total = 0.0  # host time spent compiling the misses' streams
        self.last_patch_ms = 0.0

    def key(self, batch: StepBatch) -> tuple[int, ...]:
        return shape_key(self.dims, batch, self.page_size, self.params, self.device)

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._streams

    def streams(self) -> list[CompiledStream]:
        return list(self._streams.values())

    def host(self, cs: CompiledStream, batch: StepBatch) -> CompiledStream:
        """`cs` (a stream of this cache) with its step args patched for `batch`, a step of another shape padded to
        its counts (engine/cuda/stream_hosting.py); counts as a use of `cs` for the LRU."""
        self._streams.move_to_end(cs.key)
        self.hosted += 1
        cs.patch(batch)
        return cs

    def get(self, batch: StepBatch, key: tuple[int, ...] | None = None) -> CompiledStream:
        """`batch`'s stream (`key`: its shape key, where the caller has it), compiled now if it is not cached."""
        key = self.key(batch) if key is None else key
        cs = self._streams.get(key)
        if cs is None:
            self.misses += 1
            t0 = time.perf_counter()
            cs = self.store.load(key, batch) if self.store is not None else None
            if cs is not None:
                load_ms = (time.perf_counter() - t0) * 1e3
                self.build_ms_total += load_ms
                self._insert(key, cs, "loaded the stream an earlier run compiled", load_ms)
                return cs
            cs = self.compile(batch)
            self.build_ms_total += cs.build_ms
            self._insert(key, cs, "compiled the stream", cs.build_ms)
            if self.store is not None:
                self.store.save(key, cs)
            return cs
        self._streams.move_to_end(key)
        self.hits += 1
        t0 = time.perf_counter()
        cs.patch(batch)
        self.last_patch_ms = (time.perf_counter() - t0) * 1e3
        return cs

    def compile(self, batch: StepBatch) -> CompiledStream:
        """`batch`'s stream, compiled and not cached (any thread: it reads only the cache's fixed settings)."""
        return compile_stream(self.dims, batch, self.page_size, self.params, self.device)

    def adopt(self, key: tuple[int, ...], cs: CompiledStream) -> None:
        """Cache `cs`, compiled off the engine thread (engine/cuda/background_builds.py), as `key`'s stream."""
        self.background += 1
        self._insert(key, cs, "adopted the stream compiled off the engine thread", cs.build_ms)

    def _insert(self, key: tuple[int, ...], cs: CompiledStream, what: str, ms: float) -> None:
        """Cache `cs` as `key`'s stream; logs what was done for the new step shape and how long it took."""
        splits = f"{key[3]}" if len(key) == 4 else f"per sequence, up to {max(key[3:])}"
        log.info("new step shape (%d tokens, %d sequences, %d-page tables, KV splits %s): %s (%d instructions in "
                 "%.2f s)", key[0], key[1], key[2], splits, what, len(cs.stream.instrs), ms / 1e3)
        self._streams[key] = cs
        while len(self._streams) > self.capacity:
            self._streams.popitem(last=False)

    def stats(self) -> StreamStats:
        return StreamStats(self.hits, self.misses, self.build_ms_total / 1e3, self.hosted, self.background)

    def with_policy(self, policy: str) -> StreamCache:
        return StreamCache(self.dims, self.page_size, replace(self.params, policy=policy), self.device)
