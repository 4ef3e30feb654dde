"""An opcode whose instructions do different work by kind (TILE_MATMUL's QKV, O, GATE_UP, DOWN, LM_HEAD) shows each kind
apart in the summary, the phases, the Gantt legend and the trace, and keeps its kinds through raw.npz."""
from __future__ import annotations

from pathlib import Path

from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from engine.simulated_profile import record_from_compiled
from models.llama.presets import preset_config
from profiler.gantt_data import gantt_data
from profiler.record import load_npz, save_npz
from profiler.spans import to_spans
from profiler.summary import summarize
from profiler.trace import to_trace

KINDS = {"TILE_MATMUL.QKV", "TILE_MATMUL.O", "TILE_MATMUL.GATE_UP", "TILE_MATMUL.DOWN", "TILE_MATMUL.LM_HEAD"}


def _record():  # noqa: ANN202
    d = ModelDims.from_config(preset_config("tiny"))
    cs = compile_stream(d, decode_batch(12, 20, 16), 16, BuildParams.of("lpt", tile_min_tokens=9), TargetDevice(16))
    return record_from_compiled(cs, {"model": "tiny"})


def test_each_kind_is_its_own_row_of_the_summary_and_the_legend(tmp_path: Path) -> None:
    rec = _record()
    names = {o.name for o in summarize(rec).opcodes}
    assert KINDS <= names and "TILE_MATMUL" not in names
    legend = {op["name"] for op in gantt_data(to_spans(rec))["ops"] if op["count"]}
    assert KINDS <= legend
    events = {e["name"] for e in to_trace(to_spans(rec))["traceEvents"] if e.get("ph") == "X"}
    assert KINDS <= events
    again = load_npz(save_npz(rec, tmp_path / "raw.npz"))
    assert again.opcode_kinds == rec.opcode_kinds and {o.name for o in summarize(again).opcodes} == names
