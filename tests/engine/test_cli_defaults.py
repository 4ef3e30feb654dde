"""One default per setting: every command-line flag that sets a field of EngineConfig, BenchConfig (bench) or
server BenchConfig (bench-serve) defaults to that field's default, and docs/SERVING.md's flag table agrees."""
from __future__ import annotations

import argparse
import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from engine.bench.config import BenchConfig
from engine.cli.main import build_parser
from engine.engine_config import EngineConfig
from server.bench_serve import BenchConfig as ServeBenchConfig

ROOT = Path(__file__).resolve().parents[2]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _defaults(cls: type) -> dict[str, object]:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


# Flags the command resolves itself: bench picks the device and the preset by machine ("auto", None); profile's
# --policy None lets a --kernel-option policy=... through before the engine's default.
RESOLVED_BY_THE_COMMAND = {("bench", "device"), ("bench", "preset"), ("profile", "policy")}


@pytest.mark.parametrize("command,cls", [
    ("serve", EngineConfig), ("generate", EngineConfig), ("profile", EngineConfig),
    ("bench", BenchConfig), ("bench-serve", ServeBenchConfig),
])
def test_flags_default_to_their_dataclass_field(command: str, cls: type) -> None:
    want = _defaults(cls)
    shared = [a for a in _subparser(command)._actions if a.dest in want and a.default is not argparse.SUPPRESS]
    assert shared, f"{command}: no flag sets a {cls.__name__} field"
    for action in shared:
        if (command, action.dest) not in RESOLVED_BY_THE_COMMAND:
            assert action.default == want[action.dest], (command, action.dest)


def test_serving_doc_lists_the_parser_defaults() -> None:
    serve = {a.dest: a.default for a in _subparser("serve")._actions}
    rows = re.findall(r"^\| `--([a-z-]+)[^`]*` \| `?([^|`]+?)`? \|", (ROOT / "docs/SERVING.md").read_text(), re.M)
    checked = 0
    for flag, doc_default in rows:
        value = serve.get(flag.replace("-", "_"))
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            assert doc_default.split()[0] == f"{value:g}" if isinstance(value, float) else str(value), flag
            checked += 1
    assert checked >= 8
