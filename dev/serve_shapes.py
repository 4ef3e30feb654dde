"""CPU only: which megakernel step shapes a serving pattern compiles. The engine (warm-up, scheduler, decode runs)
runs a tiny random checkpoint on the torch backend behind a wrapper that keys every step as the cuda backend would
for a larger model (its padding to bucketed counts, engine/cuda/step_padding.py, and its stream cache's key,
engine/scheduler/compiler/step_builder_cache.py shape_key), then `--clients` closed-loop clients send
`--requests` prompts of `--input-len` tokens for `--output-len` tokens each, as `megakernel bench-serve
--max-concurrency` does. Prints the shapes the warm-up built, the shapes serving met that the warm-up had not (each a
compile on the engine thread), how many of those an LRU of `--capacity` streams would miss, and what compiling each
costs here. What it cannot see: when a real server's requests arrive between steps, and the cuda backend's runs of
decode steps on the device.
Usage: python -m dev.serve_shapes [--preset llama-3.2-1b] [--clients 32] [--requests 128] [--capacity 32]"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter, OrderedDict

import torch

from engine.backends.base import Backend
from engine.cuda.step_padding import pad_batch
from engine.instructions.layout import ModelDims
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.scheduler.compiler.step_builder_cache import (
    BuildParams,
    compile_stream,
    shape_key,
)
from engine.scheduler.compiler.step_builder_splits import SplitParams
from engine.scheduler.compiler.target import TargetDevice
from engine.warm_up import warm_up
from models.llama.init_random import init_random_checkpoint
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch

TOKEN_GROUP = 16  # the 1B's steps of more tokens than this are padded and tiled (the cuda backend's rule)


class ShapeRecorder(Backend):
    """Runs `inner`; records each step's cuda shape key for `dims`."""

    def __init__(self, inner: Backend, dims: ModelDims, page_size: int, params: BuildParams,
                 device: TargetDevice) -> None:
        self.inner, self.dims, self.page_size, self.params, self.target = inner, dims, page_size, params, device
        self.name = inner.name
        self.max_tokens_per_step = inner.max_tokens_per_step
        self.keys: list[tuple[int, ...]] = []
        self.batches: dict[tuple[int, ...], StepBatch] = {}

    def _record(self, batch: StepBatch) -> None:
        padded = pad_batch(batch, 0) if batch.num_tokens > TOKEN_GROUP else batch
        key = shape_key(self.dims, padded, self.page_size, self.params, self.target)
        self.keys.append(key)
        self.batches.setdefault(key, padded)

    def forward(self, batch: StepBatch) -> torch.Tensor:
        self._record(batch)
        return self.inner.forward(batch)

    def greedy(self, batch: StepBatch) -> torch.Tensor:
        self._record(batch)
        return self.inner.greedy(batch)

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def serve(engine: LLMEngine, clients: int, requests: int, input_len: int, output_len: int, stagger: int,
          seed: int = 0) -> None:
    """`clients` requests in flight until `requests` have finished; each finish sends the next one after 0 to
    `stagger` engine steps (drawn), as a client's next request reaches a server some steps later."""
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    vocab = engine.config.vocab_size
    rng = random.Random(seed)
    sent = 0
    due: list[int] = []  # steps until each pending send

    def send() -> None:
        nonlocal sent
        prompt = [1 + (7 * sent + i) % (vocab - 1) for i in range(input_len)]
        engine.add_request(f"client-{sent}", {"prompt_token_ids": prompt}, params)
        sent += 1

    due = [rng.randint(0, stagger) for _ in range(min(clients, requests))]
    while due or engine.has_unfinished_requests():
        due = [d - 1 for d in due]
        for _ in [d for d in due if d < 0]:
            send()
        due = [d for d in due if d >= 0]
        if not engine.has_unfinished_requests():
            continue
        for out in engine.step():
            if out.finished and sent + len(due) < requests:
                due.append(rng.randint(0, stagger))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama-3.2-1b")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--capacity", type=int, default=32, help="streams an LRU cache keeps")
    ap.add_argument("--num-sms", type=int, default=132)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--stagger", type=int, default=0, help="a client's next request waits 0..N engine steps")
    args = ap.parse_args()
    dims = ModelDims.from_config(preset_config(args.preset))
    params = BuildParams("lpt", SplitParams(min_pages_per_split=8, token_group=TOKEN_GROUP,
                                            tile_min_tokens=TOKEN_GROUP + 1))
    device = TargetDevice(num_sms=args.num_sms)
    with tempfile.TemporaryDirectory() as tmp:
        init_random_checkpoint("tiny", tmp, seed=0, dtype="float32", progress=False)
        engine = LLMEngine(tmp, backend="torch", device="cpu", max_num_seqs=args.max_num_seqs, progress=False)
        rec = ShapeRecorder(engine.backend, dims, engine.engine_config.page_size, params, device)
        engine.backend = rec
        engine._runs.backend = rec  # noqa: SLF001 (the engine's run helpers hold the backend too)
        if engine._ahead is not None:  # noqa: SLF001 (async scheduling)
            engine._ahead.backend = rec  # noqa: SLF001
        warm_up(engine)
        warm_keys = list(rec.keys)
        warm = list(dict.fromkeys(warm_keys))
        rec.keys.clear()
        serve(engine, args.clients, args.requests, args.input_len, args.output_len, args.stagger)
        served = Counter(rec.keys)
    new = [k for k in served if k not in set(warm)]
    lru: OrderedDict[tuple[int, ...], None] = OrderedDict()
    misses = 0
    for n, k in enumerate(warm_keys + rec.keys):  # the warm-up's steps fill the cache, then serving's
        if k in lru:
            lru.move_to_end(k)
            continue
        misses += n >= len(warm_keys)
        lru[k] = None
        while len(lru) > args.capacity:
            lru.popitem(last=False)
    print(f"{args.preset}: warm-up built {len(warm)} shapes; serving ({args.clients} clients, {args.requests} "
          f"requests of {args.input_len} in / {args.output_len} out) ran {len(rec.keys)} steps of {len(served)} "
          f"shapes, {len(new)} of them not built by the warm-up; an LRU of {args.capacity} misses {misses} times")
    total = 0.0
    for k in new:
        t = time.perf_counter()
        cs = compile_stream(dims, rec.batches[k], engine.engine_config.page_size, params, device)
        s = time.perf_counter() - t
        total += s
        print(f"  new shape {k[:3]} splits {max(k[3:])}: {served[k]} steps, {len(cs.stream.instrs)} instructions, "
              f"{s:.2f} s to compile here")
    print(f"compiling the new shapes: {total:.1f} s here")


if __name__ == "__main__":
    main()
