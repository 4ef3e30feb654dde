"""Time a stream build (plan -> DAG -> costs -> schedule -> tensor) on the CPU: what the first request
of each new batch shape pays. Usage: python3 -m dev.build_time [preset] [policy]"""
from __future__ import annotations

import statistics
import sys
import time

from engine.backends.cuda_backend import DEFAULT_MIN_PAGES_PER_SPLIT
from engine.engine_config import DEFAULT_POLICY, EngineConfig
from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.step_builder_splits import SplitParams
from engine.scheduler.compiler.target import DEFAULT_SIMULATED_SMS, TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


def main(preset: str = "llama-3.2-1b", policy: str = DEFAULT_POLICY, num_sms: int = DEFAULT_SIMULATED_SMS) -> None:
    dims = ModelDims.from_config(preset_config(preset))
    split = SplitParams(min_pages_per_split=DEFAULT_MIN_PAGES_PER_SPLIT)  # the cuda backend's
    params, device = BuildParams(policy, split), TargetDevice(num_sms=num_sms)
    page, context = EngineConfig.page_size, 41
    pages = -(-context // page)
    for seqs in (1, 8, 32):
        batch = StepBatch.build([[1]] * seqs, [context - 1] * seqs,
                                [list(range(s * pages, (s + 1) * pages)) for s in range(seqs)],
                                device="cpu", page_size=page)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            compile_stream(dims, batch, page, params, device)
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"{preset} {policy} decode, {seqs} sequences: median build {statistics.median(times):.0f} ms")


if __name__ == "__main__":
    main(*sys.argv[1:3])
