"""A compiled stream as plain arrays, so it can cross a process boundary (a stream compiled in another process:
engine/cuda/background_builds.py) without its Python instruction objects.

Why: a large step's stream is a hundred thousand Instruction objects; pickling them back from a worker process and
loading them took 1.0 s for a 2 064-token step, about what compiling it on the engine thread costs. The words say
everything the instructions do (OPCODES.decode is their inverse), so the payload carries the words, the schedule, the
per-instruction costs and durations as arrays, and the plan (a small tree of tuples). `from_payload` rebuilds a
CompiledStream whose `stream.instrs` decode from the words when read (an error message naming an instruction,
a profile's simulated timeline) and whose words, tensor and step args are the arrays themselves.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

import numpy as np
import torch

from engine.instructions.cost import InstrCost
from engine.instructions.format import W_COST
from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.op_spec import Instruction
from engine.instructions.registry import OPCODES
from engine.scheduler.compiler.cost_model import CostParams, Timeline, simulate_dynamic, simulate_static
from engine.scheduler.compiler.policies import Schedule
from engine.scheduler.compiler.step_builder import Stream
from engine.scheduler.compiler.step_builder_cache import BuildParams, CompiledStream, compile_stream
from engine.scheduler.compiler.step_builder_splits import Plan
from engine.scheduler.compiler.target import TargetDevice
from models.llama.step_batch import StepBatch

T = TypeVar("T")


@dataclass(frozen=True)
class StreamPayload:
    """Everything CompiledStream holds, as arrays and small picklable values (module docstring)."""

    key: tuple[int, ...]
    shape: tuple[int, int, int]  # StepShape (num_tokens, num_seqs, max_pages)
    plan: Plan
    counter_period: np.ndarray
    counter_names: tuple[str, ...]
    words: np.ndarray  # int32 [N, WORDS], W_COST = cost_ns
    costs: np.ndarray  # int64 [N, 3]: weight_bytes, act_bytes, flops
    durations: np.ndarray  # predicted ns per instruction
    policy: str
    dynamic: bool
    queue_lens: np.ndarray  # static: instructions per SM (their flat indices are `order`, queue by queue)
    order: np.ndarray  # dynamic: claim order; static: the queues concatenated
    tensor: np.ndarray
    step_args: np.ndarray
    page_size: int
    build_ms: float
    device: TargetDevice
    cost: CostParams  # for a simulated timeline, when one is asked for


def to_payload(cs: CompiledStream, cost: CostParams) -> StreamPayload:
    s = cs.schedule
    return StreamPayload(
        key=cs.key, shape=(cs.shape.num_tokens, cs.shape.num_seqs, cs.shape.max_pages), plan=cs.stream.plan,
        counter_period=np.asarray(cs.stream.counter_period), counter_names=tuple(cs.stream.counter_names),
        words=cs.words, costs=_cost_array(cs.costs),
        durations=np.asarray(cs.durations), policy=s.policy, dynamic=s.dynamic,
        queue_lens=np.array([len(q) for q in s.queues], dtype=np.int64), order=np.array(s.order, dtype=np.int64),
        tensor=cs.tensor, step_args=cs.step_args.numpy().copy(), page_size=cs.page_size, build_ms=cs.build_ms,
        device=cs.device, cost=cost)


def _cost_array(costs: Sequence[InstrCost]) -> np.ndarray:
    """int64 [N, 3]; the compiler shares one InstrCost among the instructions of equal operands, so each distinct
    object is read once (a row per instruction took 160 ms for a 107 000-instruction step)."""
    if isinstance(costs, StoredCosts):
        return costs.array
    index: dict[int, int] = {}
    table: list[tuple[int, int, int]] = []
    which = np.empty(len(costs), dtype=np.int64)
    for k, c in enumerate(costs):
        j = index.get(id(c))
        if j is None:
            j = index[id(c)] = len(table)
            table.append((c.weight_bytes, c.act_bytes, c.flops))
        which[k] = j
    return np.array(table, dtype=np.int64).reshape(-1, 3)[which]


def compile_payload(dims: ModelDims, batch: StepBatch, page_size: int, params: BuildParams,
                    device: TargetDevice) -> StreamPayload:
    """compile_stream, as a payload (what a worker process returns)."""
    return to_payload(compile_stream(dims, batch, page_size, params, device), params.cost)


class _Rows(Sequence[T]):
    """Items made from the rows of an array when read (and kept: each is made once)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self._made: dict[int, T] = {}

    @abstractmethod
    def _make(self, row: np.ndarray) -> T:
        """The item of one row."""

    def __len__(self) -> int:
        return int(self.array.shape[0])

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = range(len(self))[i]  # negative indices, and IndexError past the end
        item = self._made.get(k)
        if item is None:
            item = self._made[k] = self._make(self.array[k])
        return item

    def __iter__(self) -> Iterator[T]:
        return (self[k] for k in range(len(self)))


class DecodedInstrs(_Rows[Instruction]):
    """A stream's instructions, decoded from its words."""

    def _make(self, row: np.ndarray) -> Instruction:
        return OPCODES.decode(row)


class StoredCosts(_Rows[InstrCost]):
    """Per-instruction cost estimates from the payload's int64 [N, 3] array (weight_bytes, act_bytes, flops)."""

    def _make(self, row: np.ndarray) -> InstrCost:
        w, a, f = (int(v) for v in row)
        return InstrCost(w, a, f)


def from_payload(p: StreamPayload, dims: ModelDims) -> CompiledStream:
    """The CompiledStream `p` was made from, its instructions decoded lazily (module docstring)."""
    instrs = DecodedInstrs(p.words)
    cost_ns = np.ascontiguousarray(p.words[:, W_COST])
    stream = Stream(dims, StepShape(*p.shape), p.plan, instrs, p.counter_period,  # type: ignore[arg-type]
                    list(p.counter_names), cost_ns)
    # the words are the encoding of these instructions with these costs (Stream.words' caches, keyed by identity)
    stream._encoded = (instrs, p.words)
    stream._words = (instrs, cost_ns, p.words)
    cuts = np.cumsum(p.queue_lens)[:-1] if len(p.queue_lens) else []
    queues = [q.tolist() for q in np.split(p.order, cuts)] if not p.dynamic else []
    order = p.order.tolist()

    def simulate() -> Timeline:
        listed = list(instrs)
        if p.dynamic:
            return simulate_dynamic(order, listed, p.durations, p.cost, p.device)
        return simulate_static(queues, listed, p.durations, p.cost)

    schedule = Schedule(p.policy, p.device.num_sms, p.dynamic, queues, order, simulate)
    return CompiledStream(stream, p.device, schedule, StoredCosts(p.costs),  # type: ignore[arg-type]
                          p.durations, p.tensor, torch.from_numpy(p.step_args.copy()), p.page_size, p.build_ms, p.key)
