"""Summarise `nvcc -Xptxas -v` output: registers, stack and spills per kernel."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class KernelResources:
    kernel: str  # mangled name, as ptxas prints it
    arch: str
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def parse_ptxas(log: str) -> list[KernelResources]:
    """One record per entry function; a kernel compiled twice (several objects) appears twice."""
    out: list[KernelResources] = []
    name = arch = None
    frame: tuple[int, int, int] | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name, arch, frame = m.group(1), m.group(2), None
        elif (m := _FRAME.search(line)) and name:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _REGS.search(line)) and name and arch:
            stack, st, ld = frame or (0, 0, 0)
            out.append(KernelResources(name, arch, int(m.group(1)), stack, st, ld))
            name = arch = None
    return out


def demangle(names: list[str]) -> list[str]:
    """Readable kernel names via c++filt when installed (else the mangled names), without
    anonymous-namespace noise and parameter lists."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return names
    proc = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False)
    out = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out) != len(names):
        return names
    return [_strip_params(re.sub(r"\(anonymous namespace\)::", "", n)) for n in out]


def _strip_params(name: str) -> str:
    """Drops the trailing parameter list, keeping template arguments such as `<(hint)0>`."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def format_report(kernels: list[KernelResources]) -> str:
    if not kernels:
        return "  (no ptxas -v records found)"
    names = demangle([k.kernel for k in kernels])
    width = min(max(len(n) for n in names), 90)
    rows = [f"  {'kernel':<{width}}  regs  stack  spill(st/ld)"]
    for name, k in sorted(zip(names, kernels), key=lambda nk: nk[0]):
        flag = "  <-- SPILLS" if k.spills else ""
        rows.append(f"  {name[:width]:<{width}}  {k.registers:4d}  {k.stack_bytes:5d}  "
                    f"{k.spill_store_bytes}/{k.spill_load_bytes}{flag}")
    return "\n".join(rows)
