"""The engine in its own thread, bridged to asyncio.

One thread owns the `LLMEngine` (it is not thread-safe): it loads it, drains a command queue
(add / abort / arbitrary calls), runs `step()` while work is pending, and hands each step's results
to the event loop in ONE `call_soon_threadsafe` per HTTP request. Concurrent HTTP requests are
therefore batched continuously by the engine's scheduler, and the event loop never blocks on a
forward pass. The thread ships only what is new since the last step (token ids, logprobs), so the
cost per step stays proportional to the batch, not to the generated lengths.
"""
from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from server.metrics import ServerMetrics
from server.request_stream import ChoiceEvent, EngineDeadError, QueueFullError, RequestStream

log = logging.getLogger(__name__)

_IDLE_POLL_S = 0.25  # how often an idle engine thread re-checks the stop flag


@dataclass
class _Live:
    stream: RequestStream
    arrival: float
    sent_tokens: int = 0
    first_token: float | None = None
    last_token: float | None = None


@dataclass
class _Pending:
    events: dict[int, tuple[RequestStream, list[ChoiceEvent]]] = field(default_factory=dict)

    def add(self, stream: RequestStream, ev: ChoiceEvent) -> None:
        self.events.setdefault(id(stream), (stream, []))[1].append(ev)


class AsyncEngine:
    """Owns the engine thread. Pass an engine, or a factory that loads one inside the thread (so
    /health can answer 503 while a large checkpoint loads)."""

    def __init__(self, engine: Any = None, *, engine_factory: Callable[[], Any] | None = None,
                 served_model_name: str = "model", max_pending: int = 1024,
                 metrics: ServerMetrics | None = None):
        if (engine is None) == (engine_factory is None):
            raise ValueError("AsyncEngine: pass exactly one of engine or engine_factory")
        if max_pending < 1:
            raise ValueError(f"AsyncEngine: max_pending must be >= 1, got {max_pending}")
        self._factory = engine_factory if engine is None else (lambda: engine)
        self.served_model_name = served_model_name
        self.max_pending = max_pending
        self.metrics = metrics if metrics is not None else ServerMetrics(served_model_name)
        self._engine: Any = None
        self.tokenizer: Any = None  # a private copy for the event-loop thread (HF tokenizers are not re-entrant)
        self._cmds: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._live: dict[str, _Live] = {}  # engine thread only
        self._pending_lock = threading.Lock()
        self._pending = 0  # engine requests admitted and not yet finished/aborted
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="megakernel-engine", daemon=True)

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._cmds.put(lambda: None)  # wake the thread
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and self.error is None

    @property
    def engine(self) -> Any:
        if not self.is_ready:
            raise EngineDeadError(self.error or "engine not loaded yet")
        return self._engine

    @property
    def num_pending(self) -> int:
        return self._pending

    # ---- event-loop API --------------------------------------------------------------------
    async def submit(self, requests: Sequence[tuple[str, Any, Any]]) -> RequestStream:
        """Add (request_id, prompt, SamplingParams) requests atomically: all are added or none
        (ValueError from the engine is re-raised here). Raises QueueFullError when full."""
        if not self.is_ready:
            raise EngineDeadError(self.error or "engine not loaded yet")
        with self._pending_lock:
            if self._pending + len(requests) > self.max_pending:
                raise QueueFullError(
                    f"server overloaded: {self._pending} requests in flight, limit {self.max_pending}; retry later")
            self._pending += len(requests)
        stream = RequestStream([rid for rid, _, _ in requests])
        try:
            await self._in_engine_thread(lambda: self._add_all(stream, requests))
        except asyncio.CancelledError:
            # The client left while the add was queued: the add may still run, so abort after it
            # (commands run in order); the abort releases the pending slots.
            self.abort(stream.request_ids)
            raise
        except BaseException:
            self._release(len(requests))  # _add_all rolled back every add
            raise
        return stream

    def abort(self, request_ids: Sequence[str]) -> None:
        """Thread-safe, fire-and-forget: abort these requests and free their KV pages."""
        ids = list(request_ids)
        self._cmds.put(lambda: self._abort_all(ids))

    async def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run fn(engine) in the engine thread (between steps) and return its result."""
        return await self._in_engine_thread(lambda: fn(self._engine))

    # ---- internals -------------------------------------------------------------------------
    async def _in_engine_thread(self, fn: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def resolve(ok: bool, value: Any) -> None:
            if not fut.done():
                fut.set_result(value) if ok else fut.set_exception(value)

        def cmd() -> None:
            try:
                res = (True, fn())
            except BaseException as exc:  # delivered to the awaiting coroutine
                res = (False, exc)
            loop.call_soon_threadsafe(resolve, *res)

        if self._stop.is_set():
            raise EngineDeadError("engine is shutting down")
        self._cmds.put(cmd)
        return await fut

    def _release(self, n: int) -> None:
        with self._pending_lock:
            self._pending -= n

    def _add_all(self, stream: RequestStream, requests: Sequence[tuple[str, Any, Any]]) -> None:
        added: list[str] = []
        now = time.perf_counter()
        try:
            for rid, prompt, params in requests:
                if rid in self._live:
                    raise ValueError(f"duplicate request id {rid!r}")
                self._engine.add_request(rid, prompt, params)
                added.append(rid)
                self._live[rid] = _Live(stream, now)
        except BaseException:
            for rid in added:
                self._engine.abort(rid)
                self._live.pop(rid, None)
            raise

    def _abort_all(self, ids: list[str]) -> None:
        for rid in ids:
            live = self._live.pop(rid, None)
            if live is None:
                continue  # already finished
            self._engine.abort(rid)
            self._release(1)
            self.metrics.request_finished("abort")
        self._publish_stats()

    def _run(self) -> None:
        try:
            self._engine = self._factory()
            self.tokenizer = copy.deepcopy(self._engine.tokenizer)
        except BaseException as exc:
            self.error = f"engine failed to load: {type(exc).__name__}: {exc}"
            log.exception("engine failed to load")
            self._ready.set()
            return
        self._ready.set()
        self._publish_stats()
        while not self._stop.is_set():
            self._drain(block=not self._engine.has_unfinished_requests())
            if self._stop.is_set() or not self._engine.has_unfinished_requests():
                continue
            try:
                outputs = self._engine.step()
            except BaseException as exc:
                self._fail_all(exc)
                return
            self._dispatch(outputs)
            self._publish_stats()

    def _drain(self, block: bool) -> None:
        try:
            cmd = self._cmds.get(timeout=_IDLE_POLL_S) if block else self._cmds.get_nowait()
        except queue.Empty:
            return
        while True:
            cmd()
            try:
                cmd = self._cmds.get_nowait()
            except queue.Empty:
                return

    def _dispatch(self, outputs: Sequence[Any]) -> None:
        now = time.perf_counter()
        pending = _Pending()
        for out in outputs:
            live = self._live.get(out.request_id)
            if live is None:
                continue  # aborted meanwhile
            comp = out.outputs[0]
            n_total = len(comp.token_ids)
            new_ids = list(comp.token_ids[live.sent_tokens:])
            new_lp = list(comp.logprobs[live.sent_tokens:]) if comp.logprobs is not None else None
            first = live.sent_tokens == 0 and live.first_token is None
            self._observe_tokens(live, len(new_ids), now, len(out.prompt_token_ids) if first else 0)
            live.sent_tokens = n_total
            finish = comp.finish_reason if out.finished else None
            if out.finished and finish is None:
                finish = "stop"
            pending.add(live.stream, ChoiceEvent(
                request_id=out.request_id, text=comp.text, new_token_ids=new_ids, new_logprobs=new_lp,
                num_prompt_tokens=len(out.prompt_token_ids), num_output_tokens=n_total,
                finish_reason=finish, stop_reason=comp.stop_reason,
                prompt_token_ids=list(out.prompt_token_ids) if first else None))
            if finish is not None:
                del self._live[out.request_id]
                self._release(1)
                self.metrics.e2e.observe(now - live.arrival)
                self.metrics.request_finished(finish)
        for stream, events in pending.events.values():
            stream.loop.call_soon_threadsafe(stream._put, events)

    def _observe_tokens(self, live: _Live, n_new: int, now: float, n_prompt: int) -> None:
        m = self.metrics
        if n_prompt:
            m.prompt_tokens.inc(n_prompt)
        if n_new == 0:
            return
        m.generation_tokens.inc(n_new)
        if live.first_token is None:
            live.first_token = now
            m.ttft.observe(now - live.arrival)
            n_new -= 1
        elif live.last_token is not None:
            for _ in range(n_new):  # several tokens in one step share the interval
                m.itl.observe((now - live.last_token) / n_new)
        live.last_token = now

    def _publish_stats(self) -> None:
        try:
            s = self._engine.get_stats()
            self.metrics.set_engine_stats(s.num_running, s.num_waiting, s.kv_usage)
        except Exception:  # stats are best-effort; never take the engine thread down for them
            log.debug("get_stats failed", exc_info=True)

    def _fail_all(self, exc: BaseException) -> None:
        self.error = f"engine step failed: {type(exc).__name__}: {exc}"
        log.error(self.error, exc_info=exc)
        err = EngineDeadError(self.error)
        streams = {id(live.stream): live.stream for live in self._live.values()}
        self._live.clear()
        for stream in streams.values():
            stream.loop.call_soon_threadsafe(stream._put, err)
