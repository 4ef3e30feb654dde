"""The fixed-width instruction record shared by the scheduler, the CPU VM and the CUDA interpreter.

One instruction is `WORDS` int32 words (128 bytes, one word per lane of a warp):

    w0      opcode (0 = NOOP: padding / end of a static queue)
    w1      global instruction id (index in the step's topological list; watchdog + profiler)
    w2      layer (-1 for EMBED / LM_HEAD / ARGMAX_REDUCE)
    w3..15  opcode operands (see `opcodes.py` and docs/INSTRUCTIONS.md)
    w16     number of waits (0..MAX_WAITS)
    w17..26 MAX_WAITS (counter, target) pairs; unused pairs are (-1, 0)
    w27     signal counter (-1 = signals nothing)
    w28     signal amount added to that counter when the outputs are globally visible
    w29     cost estimate in nanoseconds (scheduling hint / profiler; never affects semantics)
    w30..31 reserved, 0

A wait (c, t) is satisfied in the step with epoch `e` iff `counters[c] >= e * counter_period[c] + t`:
counters are monotonic across the steps run with one stream, so the host never clears them.
"""
from __future__ import annotations

from dataclasses import dataclass

FORMAT_VERSION = 4
WORDS = 32
MAX_WAITS = 5
NUM_OPERANDS = 13

W_OPCODE = 0
W_ID = 1
W_LAYER = 2
W_OPERANDS = 3  # first operand word; operands occupy [W_OPERANDS, W_OPERANDS + NUM_OPERANDS)
W_NUM_WAITS = 16
W_WAITS = 17  # pair k is (w[17 + 2k], w[18 + 2k])
W_SIGNAL = 27
W_SIGNAL_AMOUNT = 28
W_COST = 29
W_RESERVED = (30, 31)

OP_NOOP = 0  # opcode 0 is NOOP in every opcode table: a static queue ends at its first NOOP
NO_COUNTER = -1
INT32_MAX = 2**31 - 1


class InstructionFormatError(ValueError):
    """An instruction record or one of its fields is malformed; the message names the field."""


@dataclass(frozen=True)
class Wait:
    """Block until `counter` has received `target` signal units in the current step."""

    counter: int
    target: int

    def __post_init__(self) -> None:
        if not (isinstance(self.counter, int) and 0 <= self.counter <= INT32_MAX):
            raise InstructionFormatError(f"Wait.counter: expected a counter index >= 0, got {self.counter!r}")
        if not (isinstance(self.target, int) and 1 <= self.target <= INT32_MAX):
            raise InstructionFormatError(f"Wait.target: expected a target >= 1, got {self.target!r}")


@dataclass(frozen=True)
class Header:
    """The opcode-independent part of an instruction: identity, dependencies and cost."""

    instr_id: int = 0
    layer: int = -1
    waits: tuple[Wait, ...] = ()
    signal: int = NO_COUNTER
    signal_amount: int = 0
    cost_ns: int = 0

    def __post_init__(self) -> None:
        if len(self.waits) > MAX_WAITS:
            raise InstructionFormatError(f"Header.waits: at most {MAX_WAITS} waits, got {len(self.waits)}")
        if self.signal == NO_COUNTER:
            if self.signal_amount != 0:
                raise InstructionFormatError("Header.signal_amount: must be 0 when signal is -1")
        elif self.signal < 0 or self.signal_amount < 1:
            raise InstructionFormatError(
                f"Header.signal/signal_amount: bad pair ({self.signal}, {self.signal_amount})")
        if not 0 <= self.cost_ns <= INT32_MAX:
            raise InstructionFormatError(f"Header.cost_ns: out of int32 range: {self.cost_ns}")

    def encode_into(self, words: list[int]) -> None:
        words[W_ID] = self.instr_id
        words[W_LAYER] = self.layer
        words[W_NUM_WAITS] = len(self.waits)
        for k in range(MAX_WAITS):
            c, t = (self.waits[k].counter, self.waits[k].target) if k < len(self.waits) else (NO_COUNTER, 0)
            words[W_WAITS + 2 * k] = c
            words[W_WAITS + 2 * k + 1] = t
        words[W_SIGNAL] = self.signal
        words[W_SIGNAL_AMOUNT] = self.signal_amount
        words[W_COST] = self.cost_ns

    @staticmethod
    def decode(words: list[int]) -> Header:
        n = words[W_NUM_WAITS]
        if not 0 <= n <= MAX_WAITS:
            raise InstructionFormatError(f"word {W_NUM_WAITS} (num_waits): {n} not in [0, {MAX_WAITS}]")
        waits = tuple(Wait(words[W_WAITS + 2 * k], words[W_WAITS + 2 * k + 1]) for k in range(n))
        return Header(words[W_ID], words[W_LAYER], waits, words[W_SIGNAL], words[W_SIGNAL_AMOUNT], words[W_COST])
