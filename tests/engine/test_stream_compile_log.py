"""Each step shape compiled is one INFO line naming the shape and its cost (a server logs them: which shapes its
traffic meets first, and what each costs the engine thread); a cache hit logs nothing."""
from __future__ import annotations

import logging

import pytest

from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, StreamCache
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config


def test_a_compile_logs_its_shape_once(caplog: pytest.LogCaptureFixture) -> None:
    dims = ModelDims.from_config(preset_config("smollm2-135m"))
    cache = StreamCache(dims, 16, BuildParams.of("lpt"), TargetDevice(num_sms=16))
    with caplog.at_level(logging.INFO, logger="engine"):
        cache.get(decode_batch(3, 20, 16))
        cache.get(decode_batch(3, 20, 16))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("engine.")]
    assert len(lines) == 1, lines
    assert "(3 tokens, 3 sequences, 64-page tables, KV splits 1)" in lines[0] and " instructions in " in lines[0]
