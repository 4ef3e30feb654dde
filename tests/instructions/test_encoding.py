"""32-word encode/decode round trips, malformed-record errors, and the opcode table's checks."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from engine.instructions import registry as op
from engine.instructions.format import (
    FORMAT_VERSION, MAX_WAITS, W_NUM_WAITS, W_OPCODE, W_RESERVED, WORDS, Header, InstructionFormatError, Wait,
)
from engine.instructions.op_spec import Instruction, OpSpec
from engine.instructions.ops import embed, noop
from engine.instructions.ops.attn_o_proj import AttnOProj
from engine.instructions.ops.attn_partial import AttnPartial
from engine.instructions.ops.lm_head import LmHead
from engine.instructions.ops.rms_qkv_rope_append import RmsQkvRopeAppend

CLASSES = {code: spec.instruction for code, spec in op.OPCODES.specs.items()}


def _random_instr(cls: type, rng: random.Random) -> Instruction:
    waits = tuple(Wait(rng.randrange(0, 10_000), rng.randrange(1, 1 << 30)) for _ in range(rng.randrange(MAX_WAITS + 1)))
    signal = rng.choice([-1, rng.randrange(0, 5000)])
    hdr = Header(instr_id=rng.randrange(1 << 20), layer=rng.randrange(-1, 80), waits=waits, signal=signal,
                 signal_amount=0 if signal == -1 else rng.randrange(1, 9), cost_ns=rng.randrange(1 << 31))
    ops = {n: rng.randrange(-(1 << 31), 1 << 31) for n in cls.OPERANDS}
    return cls(**ops, header=hdr)


@pytest.mark.parametrize("code", sorted(CLASSES), ids=lambda c: op.OPCODE_NAMES[c])
def test_round_trip(code: int) -> None:
    cls = CLASSES[code]
    rng = random.Random(code * 31 + 1)
    for _ in range(50):
        ins = _random_instr(cls, rng)
        words = op.encode(ins)
        assert len(words) == WORDS and words[W_OPCODE] == code
        assert op.decode(words) == ins
        arr = op.encode_many([ins, ins])
        assert arr.dtype == np.int32 and arr.shape == (2, WORDS)
        assert op.decode(arr[1]) == ins


def test_operands_fit_in_the_record() -> None:
    for cls in CLASSES.values():
        assert len(cls.OPERANDS) <= 13, cls
        fields = {f.name for f in dataclasses.fields(cls)} - {"header"}
        assert fields == set(cls.OPERANDS), cls


def test_decode_rejects_malformed_words() -> None:
    good = op.encode(LmHead(0, 16, 0, header=Header(3, -1, (Wait(2, 4),), 5, 1)))
    for word, value, msg in [(W_OPCODE, 77, "unknown opcode"), (W_RESERVED[0], 1, "reserved"),
                             (W_NUM_WAITS, MAX_WAITS + 1, "num_waits"), (10, 9, "unused word")]:
        bad = list(good)
        bad[word] = value
        with pytest.raises(InstructionFormatError, match=msg):
            op.decode(bad)
    with pytest.raises(InstructionFormatError, match="expected 32 words"):
        op.decode(good[:-1])


def test_header_validation() -> None:
    with pytest.raises(InstructionFormatError, match="target"):
        Wait(3, 0)
    with pytest.raises(InstructionFormatError, match="at most"):
        Header(waits=tuple(Wait(0, 1) for _ in range(MAX_WAITS + 1)))
    with pytest.raises(InstructionFormatError, match="signal_amount"):
        Header(signal=-1, signal_amount=2)


def test_names_cover_every_opcode() -> None:
    assert set(op.OPCODE_NAMES) == {int(o) for o in op.Opcode} == set(op.OPERAND_NAMES)


def test_opcode_mask_sets_one_bit_per_named_opcode_and_names_unknown_ones() -> None:
    mask = op.opcode_mask(("RMS_GATE_UP_SILU", "LM_HEAD", "LM_HEAD"))
    assert mask == (1 << int(op.Opcode.RMS_GATE_UP_SILU)) | (1 << int(op.Opcode.LM_HEAD))
    assert op.opcode_mask(()) == 0
    with pytest.raises(ValueError, match="GATE_UP"):
        op.opcode_mask(("GATE_UP",))


def test_attn_o_proj_and_qkv_copy_operand_words() -> None:
    """The kernel reads operands by word index: ATTN_O_PROJ's six in order from word 3, QKV's copy
    range at words 6 and 7 (format version 3)."""
    rng = random.Random()
    vals = [rng.randrange(1, 1 << 20) for _ in range(6)]
    hdr = Header(instr_id=rng.randrange(1 << 20), layer=rng.randrange(80), waits=(Wait(3, rng.randrange(1, 99)),),
                 signal=4, signal_amount=1)
    fused = AttnOProj(*vals, header=hdr)
    words = op.encode(fused)
    assert words[W_OPCODE] == 10 == op.Opcode.ATTN_O_PROJ and words[3:9] == vals and words[9:16] == [0] * 7
    assert op.decode(words) == fused
    assert fused.attention() == AttnPartial(vals[0], vals[1], 0, 1, vals[2], vals[3], header=hdr)
    qkv = RmsQkvRopeAppend(*vals[:5], header=hdr)
    words = op.encode(qkv)
    assert words[3:8] == vals[:5] and words[8:16] == [0] * 8 and op.decode(words) == qkv
    assert FORMAT_VERSION == 4


def test_the_table_rejects_clashes_and_a_missing_noop() -> None:
    with pytest.raises(InstructionFormatError, match="opcode 0 must be NOOP"):
        op.OpcodeTable({1: embed.SPEC})
    with pytest.raises(InstructionFormatError, match="share the name"):
        op.OpcodeTable({0: noop.SPEC, 1: embed.SPEC, 2: embed.SPEC})
    with pytest.raises(InstructionFormatError, match="taken by EMBED"):
        op.OPCODES.with_op(1, embed.SPEC)
    with pytest.raises(InstructionFormatError, match="outside"):
        op.OpcodeTable({0: noop.SPEC, 40: embed.SPEC})
    with pytest.raises(InstructionFormatError, match="UPPER_CASE"):
        OpSpec("embed", embed.Embed, embed.execute, embed.accesses, embed.cost)
    with pytest.raises(InstructionFormatError, match="not an opcode of this table"):
        op.OpcodeTable({0: noop.SPEC}).encode(embed.Embed(0, 1))
