"""Time a stream build (plan -> DAG -> costs -> schedule -> tensor) on the CPU: what the first request
of each new batch shape pays. Usage: python3 -m dev.build_time [preset] [policy]"""
from __future__ import annotations

import statistics
import sys
import time

from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.step_builder_splits import SplitParams
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


def main(preset: str = "llama-3.2-1b", policy: str = "lpt", num_sms: int = 132) -> None:
    dims = ModelDims.from_config(preset_config(preset))
    params, device = BuildParams(policy, SplitParams(min_pages_per_split=8)), TargetDevice(num_sms=num_sms)
    for seqs in (1, 8, 32):
        batch = StepBatch.build([[1]] * seqs, [40] * seqs, [list(range(s * 4, s * 4 + 4)) for s in range(seqs)],
                                device="cpu", page_size=16)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            compile_stream(dims, batch, 16, params, device)
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"{preset} {policy} decode, {seqs} sequences: median build {statistics.median(times):.0f} ms")


if __name__ == "__main__":
    main(*sys.argv[1:3])
