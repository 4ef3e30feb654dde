"""The kernel's instruction set as csrc/interpreter/opcodes.cuh writes it: the X(NAME, number, weights) lines of
MK_OPCODE_NOOP and MK_OPCODES, the one list the dispatch (csrc/interpreter/ops/dispatch.cuh) is generated from."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

INTERPRETER = Path(__file__).resolve().parents[2] / "csrc" / "interpreter"
OPS = INTERPRETER / "ops"
_ENTRY = re.compile(r"X\((\w+), (\d+), (\w+)\)")


@dataclass(frozen=True)
class CudaOpcode:
    name: str
    code: int
    weights: str  # STREAMED or NONE
    dispatched: bool  # in MK_OPCODES (every opcode but NOOP)


def macro_body(text: str, macro: str) -> str:
    """The body of `#define macro(X) ...` with its continuation lines."""
    m = re.search(rf"^#define {macro}\(X\)(.*)$", text, re.M)
    assert m, f"#define {macro}(X) not found"
    lines = [m.group(1)]
    rest = text[m.end() + 1:].splitlines()
    while lines[-1].rstrip().endswith("\\") and rest:
        lines.append(rest.pop(0))
    return "\n".join(lines)


def cuda_opcodes(text: str | None = None) -> list[CudaOpcode]:
    """Every entry of the two lists, NOOP's first (`text`: opcodes.cuh's, by default the tree's)."""
    text = (INTERPRETER / "opcodes.cuh").read_text() if text is None else text
    out = []
    for macro, dispatched in (("MK_OPCODE_NOOP", False), ("MK_OPCODES", True)):
        out += [CudaOpcode(n, int(c), w, dispatched) for n, c, w in _ENTRY.findall(macro_body(text, macro))]
    return out


def header_name(opcode_name: str) -> str:
    """An opcode's header in csrc/interpreter/ops/ (and its Python module's name)."""
    return f"{opcode_name.lower()}.cuh"
