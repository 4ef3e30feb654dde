"""How much a stream compile off the engine thread slows the engine thread meanwhile (engine/cuda/background_builds.py):
the calling thread repeats a small piece of host work like an engine step's (building a decode step's batch and
patching a compiled stream's step args) while a worker compiles a 2 064-token mixed step of the 1B, in a thread or
in a process; prints the host work's median and worst time per repeat with no compile, with each worker, and what
adopting the process's result costs the calling thread. Usage: python3 -m dev.build_stall [repeats]"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace
from functools import partial

from engine.cuda.background_builds import BackgroundBuilds
from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.stream_payload import compile_payload, from_payload
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch


def _host_work(cs: object, seqs: int) -> float:
    t = time.perf_counter()
    batch = decode_batch(seqs, 41, 16)
    cs.patch(batch)  # type: ignore[attr-defined]
    return (time.perf_counter() - t) * 1e3


def main(repeats: int = 200) -> None:
    dims = ModelDims.from_config(preset_config("llama-3.2-1b"))
    device = TargetDevice(num_sms=132)
    params = BuildParams("lpt", replace(SplitParams(min_pages_per_split=8), token_group=16, held_pages=9,
                                        page_bytes=16384, tile_min_tokens=17, max_out_floats=2048))
    big = StepBatch.build([list(range(1, 2001))] + [[5]] * 64, [0] + [40] * 64,
                          [list(range(130))] + [[130 + 4 * i + j for j in range(4)] for i in range(64)], page_size=16)
    small = compile_stream(dims, decode_batch(32, 41, 16), 16, params, device)

    def loop(builds: BackgroundBuilds[object] | None, job: object) -> tuple[list[float], float]:
        if builds is not None:
            builds.submit((1,), job)  # type: ignore[arg-type]
        times, t0 = [], time.perf_counter()
        while len(times) < repeats or (builds is not None and not builds.wait(0)):
            times.append(_host_work(small, 32))
        return times, time.perf_counter() - t0

    base, _ = loop(None, None)
    print(f"host work alone: median {statistics.median(base):.2f} ms, worst {max(base):.2f} ms")
    for name, builds, job in (("thread", BackgroundBuilds(processes=False),
                               partial(compile_stream, dims, big, 16, params, device)),
                              ("process", BackgroundBuilds(), partial(compile_payload, dims, big, 16, params, device))):
        if name == "process":  # the worker's start (a spawned Python importing torch) is paid once, before serving
            builds.submit((0,), partial(pow, 2, 2))
            builds.wait(120)
        times, wall = loop(builds, job)
        result = builds.take((1,))
        t = time.perf_counter()
        if name == "process":
            from_payload(result, dims)  # type: ignore[arg-type]
        adopt_ms = (time.perf_counter() - t) * 1e3
        builds.close()
        print(f"with a {name} compiling ({wall:.2f} s): median {statistics.median(times):.2f} ms, worst "
              f"{max(times):.2f} ms over {len(times)} repeats; adopting its result {adopt_ms:.1f} ms")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
