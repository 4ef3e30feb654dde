"""What one opcode module declares (`OpSpec`), the types its functions see, and generic instruction helpers.

An opcode's whole Python side lives in one module of engine/instructions/ops/ (docs/ADDING_AN_OPCODE.md): its
frozen dataclass (operands in encoding order, after the header), its reference semantics (what the VM runs),
the buffer regions it reads and writes (the race detector) and its bytes and FLOPs (the cost model). The module
ends with `SPEC = OpSpec(...)`; the opcode table (engine/instructions/registry.py) gives it its number.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from engine.instructions.accesses import Access
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import NUM_OPERANDS, Header, InstructionFormatError
from engine.instructions.layout import ModelDims
from engine.instructions.step_args import StepArgsView
from engine.instructions.tp_exchange import TpExchange


class Instruction(Protocol):
    """Any opcode's frozen dataclass: its operand fields (named in OPERANDS, in word order) and a header."""

    OPERANDS: ClassVar[tuple[str, ...]]

    @property
    def header(self) -> Header: ...


class QkvRows(Protocol):
    """Packed W_qkv row -> (kind 0=q 1=k 2=v, head, original dim) (layout.qkv_row_map)."""

    kind: np.ndarray
    head: np.ndarray
    dim: np.ndarray


class Buffers(Protocol):
    """The global memory an opcode's semantics and accesses see (the VM's engine/vm/buffers.GlobalBuffers):
    weights, activations with deferred accumulation, the KV cache and the live step args."""

    dims: ModelDims
    args: StepArgsView
    rows: QkvRows
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    # This rank's tensor-parallel exchange (its send slots and flags, and its peers'); None: one rank.
    tp: TpExchange | None

    def w(self, name: str) -> torch.Tensor: ...

    def matrix(self, name: str, *index: object) -> torch.Tensor: ...

    def kv_read(self, which: int, layer: int, pages: torch.Tensor, group: int, rows: torch.Tensor) -> torch.Tensor: ...

    def kv_write(self, which: int, index: tuple[object, ...], layer: int, group: int, value: torch.Tensor) -> None: ...

    def get(self, name: str) -> torch.Tensor: ...

    def accumulate(self, name: str, instr_id: int, index: tuple[slice, ...], value: torch.Tensor) -> None: ...


@dataclass(frozen=True)
class CrossRank:
    """An opcode whose instructions wait on other ranks as well as on counters (TP_ALLREDUCE, TP_ARGMAX): once its
    counter waits are met it `publish`es what the other ranks read, and it runs (its `execute`) once `ready` says every
    rank published. The VM of a rank group (engine/vm/rank_group.py) interleaves the two phases across ranks."""

    publish: Callable[[Any, Buffers], None]
    ready: Callable[[Any, Buffers], bool]


@dataclass(frozen=True)
class OpSpec:
    """One opcode's Python side. `name` is its OP_<name> in csrc/interpreter/opcodes.cuh; its modules are
    engine/instructions/ops/<name in lower case>.py and csrc/interpreter/ops/<same>.cuh."""

    name: str
    instruction: type  # the frozen dataclass
    execute: Callable[[Any, Buffers], None]  # reference semantics: reads and writes `Buffers` as the GPU does
    accesses: Callable[[Any, Buffers], list[Access]]  # regions touched under the live step args
    cost: Callable[[Any, CostInputs], InstrCost]  # HBM / activation bytes and FLOPs
    # (operand, value -> name) where the opcode's instructions do different work by one operand (TILE_MATMUL's kind):
    # profiles show each kind apart
    kinds: tuple[str, Mapping[int, str]] | None = None
    # The two phases of an opcode that exchanges data with other tensor-parallel ranks (None: it only waits on
    # counters of its own rank)
    cross_rank: CrossRank | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.upper():
            raise InstructionFormatError(f"OpSpec.name: expected an UPPER_CASE identifier, got {self.name!r}")
        operands = getattr(self.instruction, "OPERANDS", None)
        if not isinstance(operands, tuple) or len(operands) > NUM_OPERANDS:
            raise InstructionFormatError(f"{self.name}: OPERANDS must be a tuple of at most {NUM_OPERANDS} "
                                         f"field names, got {operands!r}")
        if self.kinds is not None and self.kinds[0] not in operands:
            raise InstructionFormatError(f"{self.name}: kinds names {self.kinds[0]!r}, not one of its OPERANDS")


def with_header(instr: Instruction, **changes: object) -> Instruction:
    """A copy of `instr` with header fields replaced (used by the builder and mutation tests)."""
    return dataclasses.replace(instr, header=dataclasses.replace(instr.header, **changes))  # type: ignore[type-var]
