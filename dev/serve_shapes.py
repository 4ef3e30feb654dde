"""CPU only: which megakernel step shapes a serving pattern compiles. The engine (warm-up, scheduler, decode runs)
runs a tiny random checkpoint on the torch backend behind a wrapper that places every step as the cuda backend would
for a larger model: padded to bucketed counts (engine/cuda/step_padding.py), keyed as its stream cache keys
(engine/scheduler/compiler/step_builder_cache.py shape_key), in an LRU of `--capacity` streams, a new shape hosted in
a compiled larger stream until it recurs (engine/cuda/stream_hosting.py; `--no-hosting`: every new shape compiled).
Then `--clients` closed-loop clients send `--requests` prompts of `--input-len` tokens for `--output-len` tokens each,
as `megakernel bench-serve --max-concurrency` does. Prints the shapes the warm-up built, how many compiles serving
caused (each a stall of the engine thread), how many steps ran hosted and the tokens their padding added, every single
step's tokens against the tokens it ran as (bucket padding and hosts), and what compiling each compiled shape costs
here. What it cannot see: when a real server's requests arrive between steps,
and the cuda backend's runs of decode steps on the device.
Usage: python -m dev.serve_shapes [--preset llama-3.2-1b] [--clients 32] [--requests 128] [--capacity 32]"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine.backends.base import Backend
from engine.cuda.step_padding import bucket_up, dummy_step, host_ladder, pad_batch
from engine.engine_config import EngineConfig
from engine.cuda.stream_hosting import DEFAULT_COMPILE_AFTER, DEFAULT_MAX_GROWTH, StreamHosting, may_host
from engine.instructions.layout import ModelDims, StepShape
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.scheduler.compiler.step_builder_cache import BuildParams, StreamCache, compile_stream, shape_key
from engine.scheduler.compiler.stream_store import StreamStore
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.target import TargetDevice
from engine.warm_up import warm_up
from models.llama.init_random import init_random_checkpoint
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch

PAD_OVER = 8  # the cuda backend pads steps of more tokens than one CUDA-core matvec takes (MAX_TOKENS_PER_MATVEC)
TOKEN_GROUP = 16  # the 1B's token group: steps of more tokens run as tiles


@dataclass
class KeyStream:
    """What the hosting rule reads of a compiled stream: its shape and key (nothing is compiled while serving)."""
    key: tuple[int, ...]
    shape: StepShape


class KeyCache:
    """StreamCache's keys and LRU without the compiles; counts compiles and hosted steps."""

    def __init__(self, dims: ModelDims, page_size: int, params: BuildParams, device: TargetDevice,
                 capacity: int) -> None:
        self.dims, self.page_size, self.params, self.device, self.capacity = dims, page_size, params, device, capacity
        self._streams: OrderedDict[tuple[int, ...], KeyStream] = OrderedDict()
        self.compiled: list[tuple[tuple[int, ...], StepBatch]] = []
        self.hosted = 0
        self.added_tokens = 0  # tokens hosted steps carried beyond their own padded shape's
        self.real_tokens = self.run_tokens = 0  # single steps' own tokens, and the tokens they ran as (padding, hosts)
        self.past_bucket = 0  # single steps run as more tokens than their own count's bucket (a dummy needs a token)

    def key(self, batch: StepBatch) -> tuple[int, ...]:
        return shape_key(self.dims, batch, self.page_size, self.params, self.device)

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._streams

    def streams(self) -> list[KeyStream]:
        return list(self._streams.values())

    def host(self, cs: KeyStream, batch: StepBatch) -> KeyStream:
        self._streams.move_to_end(cs.key)
        self.hosted += 1
        return cs

    def get(self, batch: StepBatch, key: tuple[int, ...] | None = None) -> KeyStream:
        key = self.key(batch) if key is None else key
        if key in self._streams:
            self._streams.move_to_end(key)
            return self._streams[key]
        self.compiled.append((key, batch))
        cs = self._streams[key] = KeyStream(key, StepShape(*key[:3]))
        while len(self._streams) > self.capacity:
            self._streams.popitem(last=False)
        return cs


class ShapeRecorder(Backend):
    """Runs `inner`; places each step in `cache` as the cuda backend would for the cache's model."""

    def __init__(self, inner: Backend, cache: KeyCache, hosting: StreamHosting | None) -> None:
        self.inner, self.cache, self.hosting = inner, cache, hosting
        self.name = inner.name
        self.max_tokens_per_step = inner.max_tokens_per_step

    def _record(self, batch: StepBatch) -> None:
        self.cache.real_tokens += batch.num_tokens
        ran = self._place(batch)
        self.cache.run_tokens += ran
        self.cache.past_bucket += ran > bucket_up(batch.num_tokens)

    def _place(self, batch: StepBatch) -> int:
        """Place `batch` in the cache; returns the tokens it runs as."""
        pads = batch.num_tokens > PAD_OVER
        if not may_host(batch, pads):
            self.cache.get(batch)
            return batch.num_tokens
        padded = pad_batch(batch, 0) if pads else batch
        key = self.cache.key(padded)
        hosted = (self.hosting.place(self.cache, key, batch, padded, lambda cs: True)  # type: ignore[arg-type]
                  if self.hosting else None)
        if hosted is None:
            self.cache.get(padded, key)
            return padded.num_tokens
        self.cache.added_tokens += hosted[1].num_tokens - padded.num_tokens
        return hosted[1].num_tokens

    @contextmanager
    def warming_up(self, max_tokens: int, max_seqs: int, max_table_pages: int) -> Iterator[None]:
        """As the cuda backend's: every shape compiled, then the hosts of new shapes (host_ladder)."""
        hosting, self.hosting = self.hosting, None
        try:
            yield
            for tokens, seqs in host_ladder(max_tokens, max_seqs):
                self.cache.get(dummy_step(tokens, seqs, max_table_pages, 0))
        finally:
            self.hosting = hosting

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
    ap.add_argument("--capacity", type=int, default=96, help="streams the LRU cache keeps (the cuda backend's)")
    ap.add_argument("--num-sms", type=int, default=132)
    ap.add_argument("--max-num-seqs", type=int, default=EngineConfig.max_num_seqs)
    ap.add_argument("--stagger", type=int, default=0, help="a client's next request waits 0..N engine steps")
    ap.add_argument("--no-hosting", action="store_true", help="compile every new shape (no stream hosting)")
    ap.add_argument("--compile-after", type=int, default=DEFAULT_COMPILE_AFTER)
    ap.add_argument("--max-growth", type=int, default=DEFAULT_MAX_GROWTH)
    ap.add_argument("--store", action="store_true", help="also time the warm-up's shapes compiled into a stream store "
                    "and loaded from it by a second cache (a restarted server: stream_store.py)")
    args = ap.parse_args()
    dims = ModelDims.from_config(preset_config(args.preset))
    params = BuildParams("lpt", SplitParams(min_pages_per_split=8, token_group=TOKEN_GROUP,
                                            tile_min_tokens=TOKEN_GROUP + 1))
    device = TargetDevice(num_sms=args.num_sms)
    hosting = None if args.no_hosting else StreamHosting(0, args.compile_after, args.max_growth)
    with tempfile.TemporaryDirectory() as tmp:
        init_random_checkpoint("tiny", tmp, seed=0, dtype="float32", progress=False)
        engine = LLMEngine(tmp, backend="torch", device="cpu", max_num_seqs=args.max_num_seqs, progress=False)
        cache = KeyCache(dims, engine.engine_config.page_size, params, device, args.capacity)
        rec = ShapeRecorder(engine.backend, cache, hosting)
        engine.backend = rec
        engine._runs.backend = rec  # noqa: SLF001 (the engine's run helpers hold the backend too)
        if engine._ahead is not None:  # noqa: SLF001 (async scheduling)
            engine._ahead.backend = rec  # noqa: SLF001
        warm_up(engine)
        warm = len(cache.compiled)
        hosted0 = cache.hosted
        engine.reset_counters()
        serve(engine, args.clients, args.requests, args.input_len, args.output_len, args.stagger)
        steps = engine.get_stats().steps
    new = cache.compiled[warm:]
    print(f"{args.preset}: warm-up compiled {warm} shapes ({hosted0} of its steps hosted); serving ({args.clients} "
          f"clients, {args.requests} requests of {args.input_len} in / {args.output_len} out, stagger "
          f"{args.stagger}) ran {steps} engine steps: {len(new)} compiles, {cache.hosted - hosted0} steps hosted "
          f"({cache.added_tokens} tokens added by hosts' padding); LRU of {args.capacity} streams, "
          + ("no hosting" if hosting is None else f"compile after {args.compile_after}, growth <= {args.max_growth}")
          )
    print(f"single steps' tokens: {cache.real_tokens} of their own, run as {cache.run_tokens} "
          f"({cache.run_tokens / max(1, cache.real_tokens):.2f}x); {cache.past_bucket} steps ran past their own "
          f"token count's bucket")
    total = 0.0
    for key, batch in new:
        t = time.perf_counter()
        cs = compile_stream(dims, batch, engine.engine_config.page_size, params, device)
        s = time.perf_counter() - t
        total += s
        print(f"  compiled {key[:3]} splits {max(key[3:])}: {len(cs.stream.instrs)} instructions, {s:.2f} s here")
    print(f"compiling the new shapes: {total:.1f} s here")
    if args.store:
        warm_shapes = cache.compiled[:warm]
        with tempfile.TemporaryDirectory() as root:
            spent = []
            for _ in range(2):  # the first run compiles and writes, the second loads
                page = engine.engine_config.page_size
                streams = StreamCache(dims, page, params, device, capacity=len(warm_shapes) + 1,
                                      store=StreamStore(Path(root), dims, page, params, device))
                t = time.perf_counter()
                for _, batch in warm_shapes:
                    streams.get(batch)
                assert isinstance(streams.store, StreamStore)
                streams.store.flush()  # written (on the store's writer thread) before the second run looks
                spent.append(time.perf_counter() - t)
        print(f"the warm-up's {len(warm_shapes)} shapes through a stream store: {spent[0]:.1f} s compiled and written, "
              f"{spent[1]:.1f} s loaded by a second run, here")


if __name__ == "__main__":
    main()
