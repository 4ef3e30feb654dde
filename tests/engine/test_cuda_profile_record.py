"""engine/cuda/profile.py's record_from_timing on a fake device stream (the GPU tests do not run the profile): the
instructions that ran become the record's rows, and its meta names the kernel variant that ran the step."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from engine.cuda.profile import record_from_timing
from engine.cuda.variant import VARIANT_BATCH1_FUSED
from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config

TIMING_WORDS, MARK0 = 12, 4  # csrc/interpreter/opcodes.cuh


def test_record_keeps_the_instructions_that_ran_and_names_the_variant() -> None:
    dims = ModelDims.from_config(preset_config("llama-3.2-1b"))
    cs = compile_stream(dims, decode_batch(1, 33, 16), 16, BuildParams.of("lpt", fuse_o_proj=True),
                        TargetDevice(num_sms=132))
    n = len(cs.stream.instrs)
    timing = torch.zeros((n, TIMING_WORDS), dtype=torch.int64)
    ran = np.arange(n) % 3 != 0  # a third never ran (their end stays 0)
    start = 1000 + 10 * np.arange(n)
    timing[:, 0], timing[:, 1], timing[:, 3] = torch.from_numpy(start), torch.from_numpy(start + 2), 7
    timing[torch.from_numpy(ran), 2] = torch.from_numpy(start[ran] + 5)
    ds = SimpleNamespace(timing=timing, compiled=cs, variant=VARIANT_BATCH1_FUSED)
    rec = record_from_timing(ds, MARK0, {"model": "llama-3.2-1b"})  # type: ignore[arg-type]
    assert rec.num_instructions == int(ran.sum())
    assert rec.meta == {"model": "llama-3.2-1b", "kernel": "batch1-fused"}
    assert np.array_equal(rec.end_ns - rec.start_ns, np.full(int(ran.sum()), 5))
    assert np.array_equal(rec.wait_ns, np.full(int(ran.sum()), 2))
