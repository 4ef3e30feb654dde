"""The CUDA interpreter's constants (csrc/interpreter/opcodes.cuh, config.cuh) must equal the Python
contract (engine/instructions) and the host code that reads the kernel's records (engine/cuda)."""
from __future__ import annotations

import re
from pathlib import Path

from engine.cuda import device_stream, errors
from engine.instructions import format as fmt
from engine.instructions import layout
from engine.instructions.registry import Opcode
from profiler import marks as profiler_marks
from tests.instructions.cuda_opcodes import cuda_opcodes

CSRC = Path(__file__).resolve().parents[2] / "csrc" / "interpreter"


def _constants(name: str) -> dict[str, int]:
    text = (CSRC / name).read_text()
    out = {}
    for key, value in re.findall(r"inline constexpr int (\w+) = (-?\d+);", text):
        out[key] = int(value)
    for group in re.findall(r"inline constexpr int ((?:\w+ = -?\d+, )+\w+ = -?\d+);", text):
        for key, value in re.findall(r"(\w+) = (-?\d+)", group):
            out[key] = int(value)
    return out


def test_opcodes_match_the_python_enum() -> None:
    numbers = {op.name: op.code for op in cuda_opcodes()}
    assert numbers == {op.name: int(op) for op in Opcode}
    assert max(numbers.values()) < 32  # kernel knobs take per-opcode bit masks in one int (opcodes.cuh)


def test_word_layout_matches_the_format() -> None:
    c = _constants("opcodes.cuh")
    assert c["FORMAT_VERSION"] == fmt.FORMAT_VERSION and c["WORDS"] == fmt.WORDS
    for name in ("W_OPCODE", "W_ID", "W_LAYER", "W_OPERANDS", "W_NUM_WAITS", "W_WAITS", "MAX_WAITS"):
        assert c[name] == getattr(fmt, name), name
    assert c["W_SIGNAL_COUNTER"] == fmt.W_SIGNAL and c["W_SIGNAL_AMOUNT"] == fmt.W_SIGNAL_AMOUNT


def test_step_args_header_matches_the_layout() -> None:
    c = _constants("opcodes.cuh")
    for name in ("SA_NUM_TOKENS", "SA_NUM_SEQS", "SA_MAX_PAGES", "SA_PAGE_SIZE", "SA_OFF_TOKEN_IDS",
                 "SA_OFF_POSITIONS", "SA_OFF_SLOTS", "SA_OFF_QUERY_START", "SA_OFF_CONTEXT_LENS",
                 "SA_OFF_BLOCK_TABLES", "SA_OFF_QUERY_UNITS"):
        assert c[name] == getattr(layout, name), name


def test_record_sizes_match_the_host_readers() -> None:
    c = _constants("opcodes.cuh")
    assert c["PROGRESS_WORDS"] == device_stream.PROGRESS_WORDS
    # start, dependencies met, end, SM id (engine/cuda/profile.py), then the marks (profiler/marks.py)
    assert c["TIMING_MARK0"] == 4
    marks = dict(re.findall(r"(MARK_\w+) = (\d+)", (CSRC / "marks.cuh").read_text()))
    for name in ("MARK_INPUT", "MARK_LAST_PAGE", "MARK_COMPUTED", "MARK_LOADER", "MARK_LAST_DONE", "MARK_FIRST_PAGE",
                 "MARK_LAST_PAGE_CYCLES"):
        assert int(marks[name]) == getattr(profiler_marks, name), name
    assert c["TIMING_WORDS"] >= c["TIMING_MARK0"] + len(marks)
    assert c["ERR_WORDS"] >= 13  # kind .. layer, then the stall record at words 8..12


def test_every_stall_site_and_error_kind_has_a_host_description() -> None:
    """A post-mortem names the stuck wait and the failure by these tables (engine/cuda/errors.py)."""
    sites = {int(v) for v in re.findall(r"SITE_\w+ = (\d+)", (CSRC / "state.cuh").read_text())}
    assert sites and sites == set(errors.SITES)
    kinds = {v for k, v in _constants("opcodes.cuh").items() if k.startswith("ERR_") and k != "ERR_WORDS" and v}
    assert kinds <= set(errors.KINDS)


def test_tensor_parallel_constants_match_the_exchange() -> None:
    from engine.instructions import tp_exchange

    assert _constants("config.cuh")["MAX_TP_RANKS"] == tp_exchange.MAX_TP_RANKS
    assert _constants("opcodes.cuh")["ERR_TP_PEER_TIMEOUT"] == errors.ERR_TP_PEER_TIMEOUT
