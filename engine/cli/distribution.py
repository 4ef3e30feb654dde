"""What the `megakernel` distribution declares: its version and the `megakernel.commands` entry points.

Packages above the engine (the server, the benchmarks) add their subcommands through that entry-point
group, so the engine never names them. Installed metadata is read first; a source tree run without
`pip install` (the GPU scripts only put the repository on PYTHONPATH) has none, and then the same
declarations are read from the repository's pyproject.toml.
"""
from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: no TOML reader in the standard library
    tomllib = None  # type: ignore[assignment]

DISTRIBUTION = "megakernel"
COMMAND_GROUP = "megakernel.commands"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

Register = Callable[[argparse._SubParsersAction], Any]


@dataclass(frozen=True)
class CommandPlugin:
    """One entry point of the group: `name = "module:function"`, the function adding subcommands."""

    name: str
    target: str

    def load(self) -> Register:
        module_name, _, attr = self.target.partition(":")
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def _pyproject() -> dict[str, Any]:
    if tomllib is None or not PYPROJECT.is_file():
        return {}
    try:
        return tomllib.loads(PYPROJECT.read_text())
    except (OSError, ValueError):
        return {}


def command_plugins() -> tuple[CommandPlugin, ...]:
    """The declared command plugins, from the installed metadata or else from pyproject.toml."""
    declared: dict[str, Any] = {}
    for ep in metadata.entry_points(group=COMMAND_GROUP):
        declared.setdefault(ep.name, ep.value)  # a stale second copy of the metadata must not register twice
    if not declared:
        declared = _pyproject().get("project", {}).get("entry-points", {}).get(COMMAND_GROUP, {})
    return tuple(CommandPlugin(name, target) for name, target in declared.items() if isinstance(target, str))


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        declared = _pyproject().get("project", {}).get("version")
        return f"{declared} (source tree, not installed)" if declared else "unknown (not installed)"
