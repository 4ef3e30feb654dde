"""The opcode table: opcode number -> the `OpSpec` of its module (engine/instructions/ops/), and everything
that goes through it: encoding and decoding the 32-word record, and dispatching an instruction's semantics,
accessed regions and cost to its module.

`OPCODES` is the product's instruction set; its numbers are the kernel's (csrc/interpreter/opcodes.cuh,
checked by tests/instructions/test_cuda_header_sync.py). Operands are stored in declaration order from word 3
(`format.W_OPERANDS`). Every opcode processes ALL new tokens of the step (their count is read from the
step-args header at run time), so one stream serves every decode step of a batch shape.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from enum import IntEnum
from types import MappingProxyType

import numpy as np

from engine.instructions.accesses import Access
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import (
    MAX_WAITS, NUM_OPERANDS, OP_NOOP, W_COST, W_ID, W_LAYER, W_NUM_WAITS, W_OPCODE, W_OPERANDS, W_RESERVED, W_SIGNAL,
    W_SIGNAL_AMOUNT, W_WAITS, WORDS, Header, InstructionFormatError,
)
from engine.instructions.op_spec import Buffers, Instruction, OpSpec
from engine.instructions.ops import (
    argmax_reduce, attn_o_proj, attn_partial, attn_reduce, down_residual, embed, lm_head, noop,
    o_proj_residual, rms_gate_up_silu, rms_qkv_rope_append, tile_matmul, tp_allreduce, tp_argmax,
)


class OpcodeTable:
    """An instruction set: opcode number -> OpSpec (immutable; `with_op` makes an extended copy)."""

    def __init__(self, specs: Mapping[int, OpSpec]) -> None:
        if specs.get(OP_NOOP) is None or specs[OP_NOOP].name != "NOOP" or specs[OP_NOOP].instruction.OPERANDS != ():
            raise InstructionFormatError("opcode table: opcode 0 must be NOOP (no operands): queues end at it")
        for code, spec in specs.items():
            if not 0 <= code < 32:  # kernel knobs take per-opcode bit masks in one int32 (opcode_mask)
                raise InstructionFormatError(f"opcode table: {spec.name} has number {code}, outside [0, 32)")
        for what, key in (("name", lambda s: s.name), ("instruction class", lambda s: s.instruction)):
            seen: dict[object, int] = {}
            for code, spec in specs.items():
                if key(spec) in seen:
                    raise InstructionFormatError(
                        f"opcode table: opcodes {seen[key(spec)]} and {code} share the {what} {key(spec)!r}")
                seen[key(spec)] = code
        self.specs: Mapping[int, OpSpec] = MappingProxyType(dict(sorted(specs.items())))
        self._code_of: Mapping[type, int] = MappingProxyType(
            {spec.instruction: code for code, spec in self.specs.items()})
        self.names: Mapping[int, str] = MappingProxyType({c: s.name for c, s in self.specs.items()})
        # Names of words 1.. for the profiler's tooltips: id, layer, then the operands.
        self.operand_names: Mapping[int, list[str]] = MappingProxyType(
            {c: ["id", "layer", *s.instruction.OPERANDS] for c, s in self.specs.items()})
        # The profiler's kinds (OpSpec.kinds): opcode -> (word index of the kind operand, value -> name).
        self.kinds: Mapping[int, tuple[int, dict[int, str]]] = MappingProxyType(
            {c: (W_OPERANDS + s.instruction.OPERANDS.index(s.kinds[0]), dict(s.kinds[1]))
             for c, s in self.specs.items() if s.kinds is not None})

    def with_op(self, code: int, spec: OpSpec) -> OpcodeTable:
        """This table plus one opcode (a new number): how a test or an experiment adds one."""
        if code in self.specs:
            raise InstructionFormatError(f"opcode table: number {code} is taken by {self.specs[code].name}")
        return OpcodeTable({**self.specs, code: spec})

    def enum(self, name: str = "Opcode") -> type[IntEnum]:
        """The table as an IntEnum (member names = OpSpec names)."""
        return IntEnum(name, [(s.name, c) for c, s in self.specs.items()])  # type: ignore[return-value]

    # ---- lookup
    def code_of(self, instr: Instruction) -> int:
        code = self._code_of.get(type(instr))
        if code is None:
            raise InstructionFormatError(f"{type(instr).__name__} is not an opcode of this table")
        return code

    def spec_of(self, instr: Instruction) -> OpSpec:
        return self.specs[self.code_of(instr)]

    def name_of(self, instr: Instruction) -> str:
        return self.spec_of(instr).name

    def mask(self, names: Sequence[str]) -> int:
        """Bit (1 << opcode) per named opcode, for kernel knobs that apply to some opcodes only."""
        by_name = {s.name: c for c, s in self.specs.items()}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"unknown opcode name(s) {unknown}; known: {sorted(by_name)}")
        return sum(1 << by_name[n] for n in set(names))

    # ---- the 32-word record
    def encode(self, instr: Instruction) -> list[int]:
        """The instruction's WORDS int32 words as a Python list."""
        words = [0] * WORDS
        words[W_OPCODE] = self.code_of(instr)
        for k, name in enumerate(instr.OPERANDS):
            words[W_OPERANDS + k] = int(getattr(instr, name))
        instr.header.encode_into(words)
        return words

    def encode_many(self, instrs: Sequence[Instruction]) -> np.ndarray:
        """int32 [len(instrs), WORDS]: encode() of each, column by column (a large step's stream has a hundred
        thousand instructions). Wait lists are encoded once per distinct tuple object (the builder shares one tuple
        among the blocks of an op: hashing the tuples' Wait records was most of this), then gathered by index."""
        n = len(instrs)
        out = np.zeros((n, WORDS), dtype=np.int32)
        if n == 0:
            return out
        codes = self._code_of
        by_type: dict[type, list[int]] = {}
        for k, ins in enumerate(instrs):
            by_type.setdefault(type(ins), []).append(k)
        for cls, idx in by_type.items():
            if cls not in codes:
                self.code_of(instrs[idx[0]])  # raises, naming the type
            out[idx, W_OPCODE] = codes[cls]
        headers = [ins.header for ins in instrs]
        fields = operator.attrgetter("instr_id", "layer", "signal", "signal_amount", "cost_ns")
        cols = np.array(list(map(fields, headers)), dtype=np.int64).reshape(n, 5)
        for j, w in enumerate((W_ID, W_LAYER, W_SIGNAL, W_SIGNAL_AMOUNT, W_COST)):
            out[:, w] = cols[:, j]
        unique: dict[int, int] = {}  # id of a waits tuple (all alive: the headers hold them) -> its row in `table`
        table: list[list[int]] = []
        which = np.empty(n, dtype=np.int64)
        for k, h in enumerate(headers):
            u = unique.get(id(h.waits))
            if u is None:
                words = [0] * WORDS
                h.encode_into(words)
                u = unique[id(h.waits)] = len(table)
                table.append(words[W_NUM_WAITS:W_WAITS + 2 * MAX_WAITS])
            which[k] = u
        out[:, W_NUM_WAITS:W_WAITS + 2 * MAX_WAITS] = np.array(table, dtype=np.int32)[which]
        for cls, idx in by_type.items():
            names = cls.OPERANDS
            if names:
                get = operator.attrgetter(*names)
                vals = [get(instrs[k]) for k in idx]
                out[idx, W_OPERANDS:W_OPERANDS + len(names)] = vals if len(names) > 1 else [[v] for v in vals]
        return out

    def decode(self, words: list[int] | np.ndarray) -> Instruction:
        """Inverse of `encode`; raises InstructionFormatError naming the bad word."""
        w = [int(x) for x in words]
        if len(w) != WORDS:
            raise InstructionFormatError(f"instruction: expected {WORDS} words, got {len(w)}")
        spec = self.specs.get(w[W_OPCODE])
        if spec is None:
            raise InstructionFormatError(f"word {W_OPCODE} (opcode): unknown opcode {w[W_OPCODE]}")
        cls = spec.instruction
        for r in W_RESERVED:
            if w[r] != 0:
                raise InstructionFormatError(f"word {r} (reserved): must be 0, got {w[r]}")
        ops = {name: w[W_OPERANDS + k] for k, name in enumerate(cls.OPERANDS)}
        for k in range(len(cls.OPERANDS), NUM_OPERANDS):
            if w[W_OPERANDS + k] != 0:
                raise InstructionFormatError(
                    f"word {W_OPERANDS + k}: {spec.name} has {len(cls.OPERANDS)} operands, unused word is "
                    f"{w[W_OPERANDS + k]}")
        return cls(**ops, header=Header.decode(w))  # type: ignore[no-any-return]

    # ---- dispatch to the opcode's module
    def execute(self, instr: Instruction, b: Buffers) -> None:
        self.spec_of(instr).execute(instr, b)

    def accesses(self, instr: Instruction, b: Buffers) -> list[Access]:
        """The regions `instr` touches under the current step args of `b`."""
        return self.spec_of(instr).accesses(instr, b)

    def cost(self, instr: Instruction, c: CostInputs) -> InstrCost:
        return self.spec_of(instr).cost(instr, c)


OPCODES = OpcodeTable({
    0: noop.SPEC,
    1: embed.SPEC,
    2: rms_qkv_rope_append.SPEC,
    3: attn_partial.SPEC,
    4: attn_reduce.SPEC,
    5: o_proj_residual.SPEC,
    6: rms_gate_up_silu.SPEC,
    7: down_residual.SPEC,
    8: lm_head.SPEC,
    9: argmax_reduce.SPEC,
    10: attn_o_proj.SPEC,
    11: tile_matmul.SPEC,
    12: tp_allreduce.SPEC,
    13: tp_argmax.SPEC,
})

# The product table's opcodes by name (Opcode.LM_HEAD == 8), as csrc/interpreter/opcodes.cuh numbers them.
Opcode = OPCODES.enum()
OPCODE_NAMES = OPCODES.names
OPERAND_NAMES = OPCODES.operand_names
OPCODE_KINDS = OPCODES.kinds
encode = OPCODES.encode
encode_many = OPCODES.encode_many
decode = OPCODES.decode
opcode_mask = OPCODES.mask
