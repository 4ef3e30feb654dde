"""One frozen dataclass per opcode; `encode` / `decode` map them to and from the 32-word record.

Operands are stored in declaration order from word 3 (`format.W_OPERANDS`). Which global buffers each
opcode reads and writes, and its exact math, are in `engine/instructions/semantics*.py` and
docs/INSTRUCTIONS.md. Every opcode processes ALL new tokens of the step (their count is read from the
step-args header at run time), so one stream serves every decode step of a batch shape.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Union

import numpy as np

from engine.instructions.format import (
    NUM_OPERANDS, W_OPCODE, W_OPERANDS, W_RESERVED, WORDS, Header, InstructionFormatError,
)


class Opcode(IntEnum):
    NOOP = 0
    EMBED = 1
    RMS_QKV_ROPE_APPEND = 2
    ATTN_PARTIAL = 3
    ATTN_REDUCE = 4
    O_PROJ_RESIDUAL = 5
    RMS_GATE_UP_SILU = 6
    DOWN_RESIDUAL = 7
    LM_HEAD = 8
    ARGMAX_REDUCE = 9
    ATTN_O_PROJ = 10


@dataclass(frozen=True)
class Noop:
    """Padding of static queues; an SM stops at the first NOOP of its queue."""

    OPCODE: ClassVar[Opcode] = Opcode.NOOP
    OPERANDS: ClassVar[tuple[str, ...]] = ()
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class Embed:
    """hidden[t, :] = embed[token_ids[t], :] for step tokens t in [tok_begin, tok_end)."""

    OPCODE: ClassVar[Opcode] = Opcode.EMBED
    OPERANDS: ClassVar[tuple[str, ...]] = ("tok_begin", "tok_end")
    tok_begin: int
    tok_end: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class RmsQkvRopeAppend:
    """Packed W_qkv rows [row_begin, row_end) of one KV group for all tokens: RMSNorm(hidden) · W^T,
    RoPE on q/k rows, q rows -> q buffer, k/v rows -> paged cache at each token's slot. Also
    mid[:, c] = hidden[:, c] for c in [copy_begin, copy_end) (empty unless ATTN_O_PROJ fuses the
    layer's O-proj: its accumulations into mid must start from the layer input, which QKV reads anyway)."""

    OPCODE: ClassVar[Opcode] = Opcode.RMS_QKV_ROPE_APPEND
    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end", "kv_group", "copy_begin", "copy_end")
    row_begin: int
    row_end: int
    kv_group: int
    copy_begin: int
    copy_end: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class AttnPartial:
    """Causal attention of sequence `seq`'s new tokens for q heads [head_begin, head_end) of `kv_group`
    (indices within the group's G heads) over split `split` of `num_splits` of its KV pages (range
    computed from context_lens at run time). Cutting a group's heads over several instructions puts
    otherwise idle SMs to work on short contexts, at the price of reading the group's K/V once each."""

    OPCODE: ClassVar[Opcode] = Opcode.ATTN_PARTIAL
    OPERANDS: ClassVar[tuple[str, ...]] = ("seq", "kv_group", "split", "num_splits", "head_begin", "head_end")
    seq: int
    kv_group: int
    split: int
    num_splits: int
    head_begin: int
    head_end: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class AttnReduce:
    """Log-sum-exp merge of the `num_splits` partials of (seq, kv_group) into attn_out."""

    OPCODE: ClassVar[Opcode] = Opcode.ATTN_REDUCE
    OPERANDS: ClassVar[tuple[str, ...]] = ("seq", "kv_group", "num_splits")
    seq: int
    kv_group: int
    num_splits: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class OProjResidual:
    """mid[:, r] = hidden[:, r] + attn_out · W_o[r]^T and hidden[:, r] = mid[:, r], r in [row_begin, row_end)."""

    OPCODE: ClassVar[Opcode] = Opcode.O_PROJ_RESIDUAL
    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end")
    row_begin: int
    row_end: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class RmsGateUpSilu:
    """act[:, i] = silu(gate_i) * up_i for intermediate columns i in [i_begin, i_end) (inside `slice`),
    with gate/up = RMSNorm(mid) · W^T read from the interleaved W_gate_up."""

    OPCODE: ClassVar[Opcode] = Opcode.RMS_GATE_UP_SILU
    OPERANDS: ClassVar[tuple[str, ...]] = ("i_begin", "i_end", "slice")
    i_begin: int
    i_end: int
    slice: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class DownResidual:
    """hidden[:, r] += act[:, k_begin:k_end] · W_down[r, k_begin:k_end]^T (atomic add), r in rows."""

    OPCODE: ClassVar[Opcode] = Opcode.DOWN_RESIDUAL
    OPERANDS: ClassVar[tuple[str, ...]] = ("row_begin", "row_end", "k_begin", "k_end", "slice")
    row_begin: int
    row_end: int
    k_begin: int
    k_end: int
    slice: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class LmHead:
    """Final RMSNorm of each sequence's last token, logits[:, v] for v in [v_begin, v_end), and the
    block's (max, first argmax) per sequence into lm_max/lm_arg[:, block]."""

    OPCODE: ClassVar[Opcode] = Opcode.LM_HEAD
    OPERANDS: ClassVar[tuple[str, ...]] = ("v_begin", "v_end", "block")
    v_begin: int
    v_end: int
    block: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class ArgmaxReduce:
    """out_tokens[s] = argmax over the `num_blocks` LM-head partials (ties -> smallest vocab id)."""

    OPCODE: ClassVar[Opcode] = Opcode.ARGMAX_REDUCE
    OPERANDS: ClassVar[tuple[str, ...]] = ("num_blocks",)
    num_blocks: int
    header: Header = field(default_factory=Header)


@dataclass(frozen=True)
class AttnOProj:
    """Batch-1 attention fused with its O-projection slice: o = the causal attention of sequence `seq`'s
    tokens for q heads [head_begin, head_end) of `kv_group` (as one unsplit ATTN_PARTIAL), then
    delta = o · W_o[r, those heads' columns]^T for rows r in [row_begin, row_end), added (atomically)
    into both mid and hidden. Saves the attn_out round trip and the O-proj's wait for all attention."""

    OPCODE: ClassVar[Opcode] = Opcode.ATTN_O_PROJ
    OPERANDS: ClassVar[tuple[str, ...]] = ("seq", "kv_group", "head_begin", "head_end", "row_begin", "row_end")
    seq: int
    kv_group: int
    head_begin: int
    head_end: int
    row_begin: int
    row_end: int
    header: Header = field(default_factory=Header)

    def attention(self) -> AttnPartial:
        """The attention part as the unsplit ATTN_PARTIAL it equals (semantics, accesses and cost share it)."""
        return AttnPartial(self.seq, self.kv_group, 0, 1, self.head_begin, self.head_end, header=self.header)


Instruction = Union[Noop, Embed, RmsQkvRopeAppend, AttnPartial, AttnReduce, OProjResidual, RmsGateUpSilu,
                    DownResidual, LmHead, ArgmaxReduce, AttnOProj]
OPCODE_CLASSES: dict[int, type] = {
    int(c.OPCODE): c for c in (Noop, Embed, RmsQkvRopeAppend, AttnPartial, AttnReduce, OProjResidual,
                               RmsGateUpSilu, DownResidual, LmHead, ArgmaxReduce, AttnOProj)
}
OPCODE_NAMES: dict[int, str] = {int(op): op.name for op in Opcode}


def opcode_mask(names: tuple[str, ...] | list[str]) -> int:
    """Bit (1 << opcode) per named opcode, for kernel knobs that apply to some opcodes only."""
    by_name = {op.name: int(op) for op in Opcode}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown opcode name(s) {unknown}; known: {sorted(by_name)}")
    return sum(1 << by_name[n] for n in set(names))
# Names of words 1.. for the profiler's tooltips: id, layer, then the operands.
OPERAND_NAMES: dict[int, list[str]] = {
    op: ["id", "layer", *cls.OPERANDS] for op, cls in OPCODE_CLASSES.items()
}


def encode(instr: Instruction) -> list[int]:
    """The instruction's WORDS int32 words as a Python list."""
    words = [0] * WORDS
    words[W_OPCODE] = int(instr.OPCODE)
    for k, name in enumerate(instr.OPERANDS):
        words[W_OPERANDS + k] = int(getattr(instr, name))
    instr.header.encode_into(words)
    return words


def decode(words: list[int] | np.ndarray) -> Instruction:
    """Inverse of `encode`; raises InstructionFormatError naming the bad word."""
    w = [int(x) for x in words]
    if len(w) != WORDS:
        raise InstructionFormatError(f"instruction: expected {WORDS} words, got {len(w)}")
    cls = OPCODE_CLASSES.get(w[W_OPCODE])
    if cls is None:
        raise InstructionFormatError(f"word {W_OPCODE} (opcode): unknown opcode {w[W_OPCODE]}")
    for r in W_RESERVED:
        if w[r] != 0:
            raise InstructionFormatError(f"word {r} (reserved): must be 0, got {w[r]}")
    ops = {name: w[W_OPERANDS + k] for k, name in enumerate(cls.OPERANDS)}
    for k in range(len(cls.OPERANDS), NUM_OPERANDS):
        if w[W_OPERANDS + k] != 0:
            raise InstructionFormatError(
                f"word {W_OPERANDS + k}: {cls.OPCODE.name} has {len(cls.OPERANDS)} operands, unused word is {w[W_OPERANDS + k]}")
    return cls(**ops, header=Header.decode(w))


def with_header(instr: Instruction, **changes: object) -> Instruction:
    """A copy of `instr` with header fields replaced (used by the builder and mutation tests)."""
    return dataclasses.replace(instr, header=dataclasses.replace(instr.header, **changes))


def with_cost(instr: Instruction, cost_ns: int) -> Instruction:
    """`with_header(instr, cost_ns=...)` without dataclasses.replace's reflection: the stream builder
    calls it once per instruction of every new batch shape (≈ 10k per Llama-3.2-1B step)."""
    h = instr.header
    header = Header(h.instr_id, h.layer, h.waits, h.signal, h.signal_amount, cost_ns)
    return type(instr)(**{name: getattr(instr, name) for name in instr.OPERANDS}, header=header)


def encode_many(instrs: list[Instruction]) -> np.ndarray:
    """int32 [len(instrs), WORDS]."""
    out = np.zeros((len(instrs), WORDS), dtype=np.int32)
    for i, ins in enumerate(instrs):
        out[i] = encode(ins)
    return out
