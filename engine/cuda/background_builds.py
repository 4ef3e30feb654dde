"""Stream compiles off the engine thread: a shape that recurs while hosted (stream_hosting.py) is compiled by one
worker thread while its steps keep running in the host, and adopted by the cache at its next step after the
compile is done.

Why: a compile on the engine thread stalls every request for its duration, 2.5 s for the 150 521 instructions of a
3 072-token step (H200 machine's CPU), which set a server's p99 time to first token (docs/PERFORMANCE.md). The
compile is pure host work (numpy and Python: the instruction stream, its costs and schedule) over a CPU copy of the
step; nothing the engine thread touches is shared, and the cache is changed only on the engine thread (`take` there,
then StreamCache.adopt). The worker holds the GIL while it runs Python, so the engine thread's own host work waits
for it in slices of the interpreter's switch interval meanwhile: a stretch of slower steps instead of a stop.
Measured so (H200, 1B, docs/PERFORMANCE.md): serving with it took c=32 from 5 656 to 4 102 output tok/s (median
TPOT 3.4 -> 3.9 ms, p90 3.9 -> 11.8 ms) with the p99 TTFT unchanged, so the cuda backend leaves it off by default
(`--kernel-option background_builds=1`); a compile in another process, or one that releases the GIL, would not
slow the engine thread.
"""
from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
Key = tuple[int, ...]

# Finished compiles no step has asked for yet are kept up to this many (the oldest dropped): a shape that stopped
# recurring must not hold its stream forever.
MAX_UNCLAIMED = 8


class BackgroundBuilds(Generic[T]):
    """One daemon worker thread that runs `build` callables submitted by key; results (or the exception a build
    raised) are taken back by key on the submitting thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Key, Callable[[], T]]] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._pending: set[Key] = set()
        self._done: OrderedDict[Key, T | BaseException] = OrderedDict()
        self._worker: threading.Thread | None = None

    def submit(self, key: Key, build: Callable[[], T]) -> None:
        """Run `build` on the worker unless `key` is pending or done already."""
        with self._lock:
            if key in self._pending or key in self._done:
                return
            self._pending.add(key)
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="megakernel-stream-builds", daemon=True)
                self._worker.start()
        self._jobs.put((key, build))

    def take(self, key: Key) -> T | BaseException | None:
        """`key`'s finished result (or the exception its build raised), removed; None while pending or unknown."""
        with self._lock:
            return self._done.pop(key, None)

    def wait(self, timeout: float | None = None) -> bool:
        """Until no build is pending (tests; a server's shutdown need not wait); False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def _run(self) -> None:
        while True:
            key, build = self._jobs.get()
            try:
                result: T | BaseException = build()
            except BaseException as e:  # noqa: BLE001 (handed to the engine thread, which compiles there and raises)
                result = e
            with self._lock:
                self._pending.discard(key)
                self._done[key] = result
                while len(self._done) > MAX_UNCLAIMED:
                    self._done.popitem(last=False)
                self._lock.notify_all()
