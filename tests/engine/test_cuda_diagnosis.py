"""Host-side post-mortem of a stalled megakernel step (runs on the CPU: pure word analysis)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.cuda.errors import diagnose_root_cause
from engine.instructions.layout import ModelDims
from engine.instructions.registry import Opcode
from engine.scheduler.compiler.step_builder_cache import BuildParams, StreamCache
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


def _stream(fuse_o_proj: bool = False):  # noqa: ANN202
    """A batch-1 prefill; unfused by default so it has the O_PROJ_RESIDUAL / ATTN_PARTIAL chain."""
    dims = ModelDims.from_config(preset_config("tiny"))
    cs = StreamCache(dims, 16, BuildParams.of("lpt", fuse_o_proj=fuse_o_proj), TargetDevice(num_sms=8)).get(
        StepBatch.build([[1, 2, 3]], [0], [[0]], page_size=16))
    return cs, cs.tensor.copy(), [int(p) for p in cs.stream.counter_period]


@pytest.mark.parametrize("fused,opcode", [(False, Opcode.O_PROJ_RESIDUAL), (True, Opcode.ATTN_O_PROJ)])
def test_impossible_wait_is_named(fused: bool, opcode: Opcode) -> None:
    cs, prog, period = _stream(fused)
    flat = prog.reshape(-1, 32)
    k = int(np.nonzero(flat[:, 0] == opcode)[-1][-1])  # the last such instruction in the program
    flat[k, 18] = 1 << 29
    reached = list(period)
    reached[flat[k, 27]] -= 1
    msg = diagnose_root_cause(prog, cs.stream.counter_names, period, reached)
    assert f"instruction #{flat[k, 1]} {opcode.name} waits for counter" in msg


def test_short_counter_with_met_dependencies_lists_its_signallers() -> None:
    cs, prog, period = _stream()
    flat = prog.reshape(-1, 32)
    k = int(np.nonzero(flat[:, 0] == 7)[0][0])  # a DOWN_RESIDUAL that "never finished"
    reached = list(period)
    sig = int(flat[k, 27])
    reached[sig] -= 1
    for c in range(len(period)):  # everything downstream of that counter stalled too
        if cs.stream.counter_names[c].startswith(("QKV[1]", "LM_HEAD", "DONE")):
            reached[c] = 0
    msg = diagnose_root_cause(prog, cs.stream.counter_names, period, reached)
    assert f"counter {sig} ({cs.stream.counter_names[sig]})" in msg and str(int(flat[k, 1])) in msg
    assert diagnose_root_cause(prog, cs.stream.counter_names, period, list(period)) == ""
