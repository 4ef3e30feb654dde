"""Host-side post-mortem of a stalled megakernel step (runs on the CPU: pure word analysis)."""
from __future__ import annotations

import numpy as np

from engine.cuda.errors import diagnose_root_cause
from engine.instructions.layout import ModelDims
from engine.scheduler.step_builder_cache import BuildParams, StreamCache
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


def _stream():
    dims = ModelDims.from_config(preset_config("tiny"))
    cs = StreamCache(dims, 16, BuildParams.for_sms(8, "lpt")).get(
        StepBatch.build([[1, 2, 3]], [0], [[0]], page_size=16))
    return cs, cs.tensor.copy(), [int(p) for p in cs.stream.counter_period]


def test_impossible_wait_is_named() -> None:
    cs, prog, period = _stream()
    flat = prog.reshape(-1, 32)
    k = int(np.nonzero(flat[:, 0] == 5)[-1][-1])  # the last O-proj in the program
    flat[k, 18] = 1 << 29
    reached = list(period)
    reached[flat[k, 27]] -= 1
    msg = diagnose_root_cause(prog, cs.stream.counter_names, period, reached)
    assert f"instruction #{flat[k, 1]} O_PROJ_RESIDUAL waits for counter" in msg


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
