"""The import graph of the product's packages, read from the source with `ast` (nothing is imported).

Layers, top to bottom: server -> engine -> models, with profiler a library beside them that reads records and
imports nothing of engine or server. Inside engine no two parts import each other, directly or through others:
a part is a sub-package (engine.cuda, engine.backends, ...) or a top-level module (engine.llm_engine, ...).
Function-local imports and `importlib.import_module("literal")` calls count: a lazy import is still an arrow.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("server", "engine", "models", "profiler")
# What each top-level package may import of the others (itself always).
ALLOWED = {
    "server": {"engine", "models", "profiler"},
    "engine": {"models", "profiler"},
    "models": set(),
    "profiler": {"models"},
}
IMPORT_FUNCTIONS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module (the longest prefix that is one of our modules)
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} ({self.source} -> {self.target})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` refers to: itself, or the longest prefix that is a module (a name inside it)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _imported_names(node: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, node.lineno
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the importing module's package upwards
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        for alias in node.names:
            yield f"{base}.{alias.name}", node.lineno  # a sub-module, or a name in `base`
    elif isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in IMPORT_FUNCTIONS and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            yield node.args[0].value, node.lineno


def import_edges() -> list[Edge]:
    modules = source_files()
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            for name, line in _imported_names(node, module, path.name == "__init__.py"):
                target = _resolve(name, modules)
                if target is not None and target != module:
                    edges.append(Edge(module, target, path, line))
    return edges


def engine_part(module: str) -> str | None:
    """engine.<sub-package> or engine.<top-level module>; None outside engine and for engine/__init__."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "engine" and len(parts) > 1 else None


def find_cycles(graph: dict[str, dict[str, Edge]]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component of the graph (node -> {neighbour: an edge that
    makes the arrow}) that has more than one node; empty if the graph is acyclic."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def strongconnect(node: str) -> None:  # Tarjan
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                strongconnect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return [_cycle_in(graph, set(c)) for c in components]


def _cycle_in(graph: dict[str, dict[str, Edge]], members: set[str]) -> list[Edge]:
    """A shortest cycle through the component's first node (breadth-first inside the component)."""
    start = min(members)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, {})):
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    loop = [start, *reversed(path[:-1]), start] if node != start else [start, start]
                    return [graph[a][b] for a, b in zip(loop, loop[1:])]
                if nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def group_graph(edges: list[Edge], group) -> dict[str, dict[str, Edge]]:  # noqa: ANN001 (str -> str | None)
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        a, b = group(e.source), group(e.target)
        if a is not None and b is not None and a != b:
            graph.setdefault(a, {}).setdefault(b, e)
    return graph


def _describe(cycles: list[list[Edge]]) -> str:
    return "\n".join("import cycle:\n  " + "\n  ".join(e.where() for e in cycle) for cycle in cycles)


def test_the_graph_sees_every_kind_of_import() -> None:
    """Guards the parser: a module-level, a relative, a function-local and an import_module import are all edges."""
    edges = {(e.source, e.target) for e in import_edges()}
    assert ("engine.backends.cuda_backend", "engine.cuda.device_stream") in edges  # module level
    assert ("engine.backends", "engine.backends.cuda_backend") in edges  # function-local
    assert len(edges) > 100


def test_no_cycle_between_top_level_packages() -> None:
    cycles = find_cycles(group_graph(import_edges(), lambda m: m.split(".")[0]))
    assert not cycles, _describe(cycles)


def test_no_cycle_between_parts_of_the_engine() -> None:
    cycles = find_cycles(group_graph(import_edges(), engine_part))
    assert not cycles, _describe(cycles)


def test_imports_only_go_down_the_layers() -> None:
    upward = [e.where() for e in import_edges()
              if e.target.split(".")[0] != e.source.split(".")[0]
              and e.target.split(".")[0] not in ALLOWED[e.source.split(".")[0]]]
    assert not upward, "imports against the layer order server > engine > models (profiler imports no engine, " \
                       "server):\n  " + "\n  ".join(upward)


def test_the_cuda_host_side_never_imports_a_backend() -> None:
    """engine/backends/cuda_backend.py uses engine/cuda; the reverse arrow would make the host side of the kernel
    depend on the Backend interface built on it."""
    wrong = [e.where() for e in import_edges()
             if engine_part(e.source) == "engine.cuda" and engine_part(e.target) == "engine.backends"]
    assert not wrong, "\n  ".join(wrong)


@pytest.mark.parametrize("code,found", [
    ("import engine.cuda.limits", "engine.cuda.limits"),
    ("from engine.cuda import limits", "engine.cuda.limits"),
    ("from engine.backends import has_sm90_gpu", "engine.backends"),
    ("importlib.import_module('engine.profiling')", "engine.profiling"),
    ("def f():\n    from . import limits", "engine.cuda.limits"),
])
def test_each_import_form_resolves_to_its_module(code: str, found: str) -> None:
    modules = source_files()
    names = [n for node in ast.walk(ast.parse(code)) for n, _ in _imported_names(node, "engine.cuda.errors", False)]
    assert [_resolve(n, modules) for n in names] == [found]
