"""engine/scheduler's two halves never import each other: request scheduling (requests/) decides what runs in
a step, the stream compiler (compiler/) how a step runs on the SMs. Read from the source with `ast`; function-
local imports count."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCHEDULER = Path(__file__).resolve().parents[2] / "engine" / "scheduler"


def imported_modules(path: Path) -> set[str]:
    """Every module (or name in a module) `path` imports, relative imports resolved."""
    package = ["engine", *path.parent.relative_to(SCHEDULER.parent.parent).parts[1:]]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parent = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*parent, node.module] if node.module else parent)
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


@pytest.mark.parametrize("part,other", [("compiler", "requests"), ("requests", "compiler")])
def test_one_half_never_imports_the_other(part: str, other: str) -> None:
    files = sorted((SCHEDULER / part).rglob("*.py"))
    assert files
    wrong = [f"{f.relative_to(SCHEDULER)}: {m}" for f in files for m in sorted(imported_modules(f))
             if m == f"engine.scheduler.{other}" or m.startswith(f"engine.scheduler.{other}.")]
    assert not wrong, f"engine/scheduler/{part} imports engine/scheduler/{other}:\n  " + "\n  ".join(wrong)


def test_nothing_else_lives_beside_the_two_halves() -> None:
    assert sorted(p.name for p in SCHEDULER.glob("*.py")) == ["__init__.py"]
