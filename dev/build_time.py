"""Time a stream build (plan -> DAG -> costs -> schedule -> tensor) on the CPU: what the first request
of each new batch shape pays. Decode steps of 1, 8 and 32 sequences as the cuda backend's defaults split them, then
a mixed step of 16 prompt chunks of 128 tokens beside 16 decodes as tensor-core tiles (the 1B's token group of 16,
its tiles from 17 tokens on). Usage: python3 -m dev.build_time [preset] [policy]"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

from engine.backends.cuda_backend import DEFAULT_MIN_PAGES_PER_SPLIT
from engine.engine_config import DEFAULT_POLICY, EngineConfig
from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.target import DEFAULT_SIMULATED_SMS, TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


def main(preset: str = "llama-3.2-1b", policy: str = DEFAULT_POLICY, num_sms: int = DEFAULT_SIMULATED_SMS) -> None:
    dims = ModelDims.from_config(preset_config(preset))
    split = SplitParams(min_pages_per_split=DEFAULT_MIN_PAGES_PER_SPLIT)  # the cuda backend's
    params, device = BuildParams(policy, split), TargetDevice(num_sms=num_sms)
    page, context = EngineConfig.page_size, 41
    tiled = BuildParams(policy, replace(split, token_group=16, held_pages=9, page_bytes=16384, tile_min_tokens=17,
                                        max_out_floats=2048))
    steps = [(f"decode, {seqs} sequences", params, [[1]] * seqs, [context - 1] * seqs) for seqs in (1, 8, 32)]
    steps.append(("16 prompt chunks of 128 tokens + 16 decodes, tiles", tiled, [[1] * 128] * 16 + [[1]] * 16,
                  [0] * 16 + [context - 1] * 16))
    for name, p, tokens, starts in steps:
        tables = [list(range(s * 64, (s + 1) * 64)) for s in range(len(tokens))]
        batch = StepBatch.build(tokens, starts, tables, device="cpu", page_size=page)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            cs = compile_stream(dims, batch, page, p, device)
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"{preset} {policy} {name}: {len(cs.stream.instrs)} instructions, median build "
              f"{statistics.median(times):.0f} ms")


if __name__ == "__main__":
    main(*sys.argv[1:3])
