"""Stream compiles off the engine thread: a shape that recurs while hosted (stream_hosting.py) is compiled by one
worker process while its steps keep running in the host, and adopted by the cache at its next step after the
compile is done.

Why: a compile on the engine thread stalls every request for its duration, 2.5 s for the 150 521 instructions of a
3 072-token step (H200 machine's CPU), which set a server's p99 time to first token (docs/PERFORMANCE.md). The
compile is pure host work (numpy and Python: the instruction stream, its costs and schedule) over a CPU copy of the
step. A worker thread measured slower (H200, 1B, c=32 serving 5 656 -> 4 102 output tok/s, p90 TPOT 3.9 -> 11.8 ms):
it holds the GIL while it runs Python, so the engine thread's own host work waited for it. A worker process holds
no lock of the engine's; its result comes back as arrays (a StreamPayload: 22 ms to load and rebuild for a 107 000-
instruction step against 0.95 s to compile it, this CPU). The process is spawned (the engine process has CUDA
initialised: a fork would inherit it), on the first submit; the cache is changed only on the engine thread (`take`
there, then StreamCache.adopt).
"""
from __future__ import annotations

import multiprocessing
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

T = TypeVar("T")
Key = tuple[int, ...]

# Finished compiles no step has asked for yet are kept up to this many (the oldest dropped): a shape that stopped
# recurring must not hold its stream forever.
MAX_UNCLAIMED = 8


class BackgroundBuilds(Generic[T]):
    """One worker (a spawned process; `processes=False`: a thread) that runs `build` callables submitted by key;
    results (or the exception a build raised) are taken back by key on the submitting thread. A process worker's
    builds must pickle (a module-level function and its arguments, e.g. functools.partial)."""

    def __init__(self, processes: bool = True) -> None:
        self.processes = processes
        self._executor: Executor | None = None
        self._builds: OrderedDict[Key, Future[T]] = OrderedDict()  # pending and unclaimed, oldest first

    def submit(self, key: Key, build: Callable[[], T]) -> None:
        """Run `build` on the worker unless `key` is pending or done already."""
        if key in self._builds:
            return
        if self._executor is None:
            self._executor = (ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
                              if self.processes else ThreadPoolExecutor(1, thread_name_prefix="megakernel-builds"))
        try:
            self._builds[key] = self._executor.submit(build)
        except Exception as e:  # noqa: BLE001 (a worker that died: the engine thread compiles, and raises there)
            failed: Future[T] = Future()
            failed.set_exception(e)
            self._builds[key] = failed
        self._prune()

    def take(self, key: Key) -> T | BaseException | None:
        """`key`'s finished result (or the exception its build raised), removed; None while pending or unknown."""
        self._prune()
        f = self._builds.get(key)
        if f is None or not f.done():
            return None
        del self._builds[key]
        e = f.exception()
        return e if e is not None else f.result()

    def wait(self, timeout: float | None = None) -> bool:
        """Until no build is pending (tests; a server's shutdown need not wait); False on timeout."""
        _, pending = wait(list(self._builds.values()), timeout=timeout)
        self._prune()
        return not pending

    def _prune(self) -> None:
        """Drop the oldest finished builds beyond MAX_UNCLAIMED."""
        done = [k for k, f in self._builds.items() if f.done()]
        for k in done[:max(0, len(done) - MAX_UNCLAIMED)]:
            del self._builds[k]

    def close(self) -> None:
        """End the worker (a running build is abandoned)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._builds.clear()
