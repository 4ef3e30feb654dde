"""Compile a step (plan -> DAG -> costs -> schedule) and cache compiled streams per batch shape.

Decode steps of one batch reuse the same stream: the cache key is (T, S, max_pages bucket, attention
splits), and only the step-args buffer is patched between steps. Block-table widths are bucketed to
powers of two (tables are -1 padded) so a growing context rebuilds only O(log) times.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from engine.instructions import opcodes as op
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.step_args import encode_step_args
from engine.scheduler.cost_model import CostParams, InstrCost, instr_cost
from engine.scheduler.policies import Schedule, make_schedule
from engine.scheduler.step_builder import Stream, build_stream
from engine.scheduler.step_builder_splits import SplitParams, make_plan, num_attn_splits
from models.llama.step_batch import StepBatch


@dataclass(frozen=True)
class BuildParams:
    policy: str = "rr"
    split: SplitParams = field(default_factory=SplitParams)
    cost: CostParams = field(default_factory=CostParams)

    @staticmethod
    def for_sms(num_sms: int, policy: str = "rr", **split_kw: object) -> BuildParams:
        return BuildParams(policy, SplitParams(num_sms=num_sms, **split_kw), CostParams(num_sms=num_sms))


@dataclass
class CompiledStream:
    stream: Stream  # instrs carry their cost estimate (word 29)
    schedule: Schedule
    costs: list[InstrCost]
    durations: np.ndarray  # predicted ns per instruction
    tensor: np.ndarray  # what the interpreter runs: static [num_sms, max_len, 32] / dynamic [N, 32]
    step_args: torch.Tensor  # int32, patched every step
    page_size: int
    build_ms: float
    backend_state: object = None  # per-stream backend data (VM buffers + counters); dropped with the stream

    @property
    def shape(self) -> StepShape:
        return self.stream.shape

    @property
    def words(self) -> np.ndarray:
        return self.stream.words()

    def patch(self, batch: StepBatch) -> None:
        encode_step_args(batch, self.shape, self.page_size, out=self.step_args)


def bucket(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def shape_key(dims: ModelDims, batch: StepBatch, page_size: int, params: BuildParams) -> tuple[int, ...]:
    max_pages = bucket(int(batch.block_tables.shape[1]))
    shape = StepShape(batch.num_tokens, batch.num_seqs, max_pages)
    ctx_pages = -(-int(batch.context_lens.max()) // page_size)
    return (shape.num_tokens, shape.num_seqs, max_pages, num_attn_splits(dims, shape, params.split, ctx_pages))


def compile_stream(dims: ModelDims, batch: StepBatch, page_size: int, params: BuildParams) -> CompiledStream:
    t0 = time.perf_counter()
    T, S, max_pages, _ = shape_key(dims, batch, page_size, params)
    shape = StepShape(T, S, max_pages)
    ctx_pages = -(-int(batch.context_lens.max()) // page_size)
    stream = build_stream(dims, shape, make_plan(dims, shape, params.split, ctx_pages))
    ctx = [int(c) for c in batch.context_lens]
    costs = [instr_cost(i, dims, shape, ctx, params.cost) for i in stream.instrs]
    dur = np.array([c.time_ns(params.cost) for c in costs])
    stream.instrs = [op.with_cost(i, int(round(d))) for i, d in zip(stream.instrs, dur)]
    schedule = make_schedule(params.policy, stream.instrs, dur, params.cost)
    tensor = schedule.tensor(stream.words())
    step_args = encode_step_args(batch, shape, page_size)
    return CompiledStream(stream, schedule, costs, dur, tensor, step_args, page_size,
                          (time.perf_counter() - t0) * 1e3)


class StreamCache:
    """Compiled streams keyed by batch shape; `get` patches the step args of a cached stream."""

    def __init__(self, dims: ModelDims, page_size: int, params: BuildParams, capacity: int = 32) -> None:
        self.dims, self.page_size, self.params = dims, page_size, params
        self.capacity = capacity  # prefill chunks create many shapes: keep the most recently used
        self._streams: OrderedDict[tuple[int, ...], CompiledStream] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.last_patch_ms = 0.0

    def get(self, batch: StepBatch) -> CompiledStream:
        key = shape_key(self.dims, batch, self.page_size, self.params)
        cs = self._streams.get(key)
        if cs is None:
            self.misses += 1
            cs = compile_stream(self.dims, batch, self.page_size, self.params)
            self._streams[key] = cs
            while len(self._streams) > self.capacity:
                self._streams.popitem(last=False)
            return cs
        self._streams.move_to_end(key)
        self.hits += 1
        t0 = time.perf_counter()
        cs.patch(batch)
        self.last_patch_ms = (time.perf_counter() - t0) * 1e3
        return cs

    def with_policy(self, policy: str) -> StreamCache:
        return StreamCache(self.dims, self.page_size, replace(self.params, policy=policy))
