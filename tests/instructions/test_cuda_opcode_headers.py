"""One home per opcode on the CUDA side: every OpSpec of the registry has exactly its header
csrc/interpreter/ops/<name>.cuh and one line in the kernel's opcode list (opcodes.cuh), with the registry's
number, included once by the dispatch (ops/dispatch.cuh); no opcode header, list line or Op<> specialisation
exists without an OpSpec (docs/ADDING_AN_OPCODE.md)."""
from __future__ import annotations

import re
from collections import Counter

from engine.instructions.registry import OPCODES
from tests.instructions.cuda_opcodes import INTERPRETER, OPS, cuda_opcodes, header_name

SPECS = {spec.name: code for code, spec in OPCODES.specs.items()}
DISPATCH = (OPS / "dispatch.cuh").read_text()
INCLUDES = re.findall(r'^#include "(\w+\.cuh)"', DISPATCH, re.M)


def test_every_opcode_has_its_header_its_line_and_its_include() -> None:
    lines = Counter(op.name for op in cuda_opcodes())
    numbers = {op.name: op.code for op in cuda_opcodes()}
    for name, code in SPECS.items():
        assert (OPS / header_name(name)).is_file(), f"{name}: no csrc/interpreter/ops/{header_name(name)}"
        assert lines[name] == 1, f"{name}: {lines[name]} lines in opcodes.cuh's opcode list, expected 1"
        assert numbers[name] == code, f"{name}: number {numbers[name]} in opcodes.cuh, {code} in the registry"
        assert INCLUDES.count(header_name(name)) == 1, f"{name}: ops/dispatch.cuh must include its header once"


def test_nothing_opcode_specific_without_an_opspec() -> None:
    headers = {p.name for p in OPS.glob("*.cuh")} - {"dispatch.cuh"}
    assert headers == {header_name(n) for n in SPECS}, "an ops/ header without an OpSpec, or the reverse"
    assert {op.name for op in cuda_opcodes()} == set(SPECS)
    assert set(INCLUDES) == headers


def test_noop_ends_queues_and_every_other_opcode_is_dispatched() -> None:
    by_name = {op.name: op for op in cuda_opcodes()}
    assert not by_name["NOOP"].dispatched and by_name["NOOP"].code == 0 and by_name["NOOP"].weights == "NONE"
    assert all(op.dispatched for op in cuda_opcodes() if op.name != "NOOP")


def test_each_dispatched_opcode_specialises_op_in_its_own_header() -> None:
    where = {}
    for path in [*INTERPRETER.glob("*.cuh"), *OPS.glob("*.cuh")]:
        for name in re.findall(r"^template <>\nstruct Op<OP_(\w+)>", path.read_text(), re.M):
            assert name not in where, f"Op<OP_{name}> specialised in {where[name]} and {path.name}"
            where[name] = path.name
    assert where == {op.name: header_name(op.name) for op in cuda_opcodes() if op.dispatched}


def test_streamed_opcodes_and_only_they_describe_their_weights() -> None:
    for op in cuda_opcodes():
        text = (OPS / header_name(op.name)).read_text()
        has_weights = "static WeightStream weights(" in text
        assert op.weights in ("STREAMED", "NONE"), op
        assert has_weights == (op.weights == "STREAMED"), f"{op.name}: weights column {op.weights}"
