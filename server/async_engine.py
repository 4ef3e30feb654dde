"""The engine in its own thread, bridged to asyncio.

One thread owns the `LLMEngine` (it is not thread-safe): it loads it, drains a command queue
(add / abort / arbitrary calls), runs `step()` while work is pending, and hands each step's results
to the event loop in ONE `call_soon_threadsafe` per step. Concurrent HTTP requests are
therefore batched continuously by the engine's scheduler, and the event loop never blocks on a
forward pass. The thread ships only what is new since the last step (token ids, logprobs), so the
cost per step stays proportional to the batch, not to the generated lengths.

Requests arrive already tokenised and checked (server/prompts.py): the engine thread only adds
them. An exception out of `step()` (or a failed load) is fatal: every in-flight request gets the
error, one line is logged, and `on_fatal` tells the process to exit so a supervisor restarts it.
"""
from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from server.metrics import ServerMetrics, TokenTimes
from server.prompts import ModelLimits
from server.request_stream import ChoiceEvent, EngineDeadError, QueueFullError, RequestStream, ShuttingDownError
from server.serve_options import DEFAULT_MAX_PENDING, DEFAULT_STREAM_INTERVAL
from server.tokenizer_pool import TokenizerPool

log = logging.getLogger(__name__)

ENGINE_THREAD = "megakernel-engine"  # the engine thread's name (dev/serve_ceiling.py and stack samples find it by it)
_IDLE_POLL_S = 0.25  # how often an idle engine thread re-checks the stop flag


@dataclass
class _Live:
    stream: RequestStream
    times: TokenTimes
    sent_tokens: int = 0


@dataclass
class _Pending:
    events: dict[int, tuple[RequestStream, list[ChoiceEvent]]] = field(default_factory=dict)

    def add(self, stream: RequestStream, ev: ChoiceEvent) -> None:
        self.events.setdefault(id(stream), (stream, []))[1].append(ev)

    def hand_over(self) -> None:
        """Every stream's events to its event loop: ONE `call_soon_threadsafe` per loop and step (each is a wake-up
        write on the loop's socket pair, made by the engine thread, which also needs the GIL back after it)."""
        by_loop: dict[int, tuple[asyncio.AbstractEventLoop, list[tuple[RequestStream, list[ChoiceEvent]]]]] = {}
        for stream, events in self.events.values():
            by_loop.setdefault(id(stream.loop), (stream.loop, []))[1].append((stream, events))
        for loop, items in by_loop.values():
            loop.call_soon_threadsafe(_put_each, items)


def _put_each(items: list[tuple[RequestStream, list[ChoiceEvent]]]) -> None:
    for stream, events in items:
        stream._put(events)


class AsyncEngine:
    """Owns the engine thread. Pass an engine, or a factory that loads one inside the thread (so
    /health can answer 503 while a large checkpoint loads). `on_fatal(message)` is called once, from
    the engine thread, when the engine dies."""

    def __init__(self, engine: Any = None, *, engine_factory: Callable[[], Any] | None = None,
                 served_model_name: str = "model", max_pending: int = DEFAULT_MAX_PENDING,
                 metrics: ServerMetrics | None = None, on_fatal: Callable[[str], None] | None = None,
                 tokenizer_workers: int = 2, stream_interval: int = DEFAULT_STREAM_INTERVAL):
        if (engine is None) == (engine_factory is None):
            raise ValueError("AsyncEngine: pass exactly one of engine or engine_factory")
        if max_pending < 1:
            raise ValueError(f"AsyncEngine: max_pending must be >= 1, got {max_pending}")
        self._factory = engine_factory if engine is None else (lambda: engine)
        self.served_model_name = served_model_name
        self.max_pending = max_pending
        self.stream_interval = stream_interval  # the streaming endpoints' StreamGate (server/serving_common.py)
        self.metrics = metrics if metrics is not None else ServerMetrics(served_model_name)
        self.on_fatal = on_fatal
        self._tokenizer_workers = tokenizer_workers
        self._engine: Any = None
        self.tokenizer: Any = None  # a private copy for the event-loop thread (HF tokenizers are not re-entrant)
        self.tokenizers: TokenizerPool | None = None  # prompt tokenisation, off both threads
        self.limits: ModelLimits | None = None
        self._cmds: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._live: dict[str, _Live] = {}  # engine thread only
        self._streams: weakref.WeakSet[RequestStream] = weakref.WeakSet()  # event-loop thread only
        self._pending_lock = threading.Lock()
        self._pending = 0  # engine requests admitted and not yet finished/aborted
        self._adds_queued = 0  # submits whose add command the engine thread has not run yet (under _pending_lock)
        self._admitting = True
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name=ENGINE_THREAD, daemon=True)

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._admitting = False
        self._stop.set()
        self._cmds.put(lambda: None)  # wake the thread
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self.tokenizers is not None:
            self.tokenizers.shutdown()

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and self.error is None

    @property
    def is_admitting(self) -> bool:
        return self._admitting

    @property
    def engine(self) -> Any:
        if not self.is_ready:
            raise EngineDeadError(self.error or "engine not loaded yet")
        return self._engine

    @property
    def num_pending(self) -> int:
        return self._pending

    # ---- event-loop API --------------------------------------------------------------------
    def stop_admitting(self) -> None:
        """Drain: every later submit raises ShuttingDownError; running requests go on."""
        self._admitting = False

    def fail_streams(self, exc: BaseException) -> int:
        """End every unfinished stream with `exc` and abort its engine requests (event-loop thread).
        Returns how many streams were ended."""
        ended = 0
        for stream in list(self._streams):
            if not stream.finished and not stream.failed:
                stream.fail(exc)
                self.abort(stream.request_ids)
                ended += 1
        return ended

    async def submit(self, requests: Sequence[tuple[str, Any, Any]]) -> RequestStream:
        """Add (request_id, engine prompt, SamplingParams) requests atomically: all are added or
        none (ValueError from the engine is re-raised here). Raises QueueFullError when full."""
        if not self._admitting:
            raise ShuttingDownError("the server is shutting down")
        if not self.is_ready:
            raise EngineDeadError(self.error or "engine not loaded yet")
        with self._pending_lock:
            if self._pending + len(requests) > self.max_pending:
                raise QueueFullError(
                    f"server overloaded: {self._pending} requests in flight, limit {self.max_pending}; retry later")
            self._pending += len(requests)
        stream = RequestStream([rid for rid, _, _ in requests])
        with self._pending_lock:
            self._adds_queued += 1
        ran = False

        def add() -> None:
            nonlocal ran
            ran = True
            with self._pending_lock:
                self._adds_queued -= 1
            self._add_all(stream, requests)

        try:
            await self._in_engine_thread(add)
        except asyncio.CancelledError:
            # The client left while the add was queued: the add may still run, so abort after it
            # (commands run in order); the abort releases the pending slots.
            self.abort(stream.request_ids)
            raise
        except BaseException:
            self._release(len(requests))  # _add_all rolled back every add
            if not ran:  # refused before it was queued (the engine is gone): it will never run
                with self._pending_lock:
                    self._adds_queued -= 1
            raise
        self._streams.add(stream)
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

        if self._stop.is_set() or not self._thread.is_alive():
            raise EngineDeadError(self.error or "engine is shutting down")
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
                added.append(rid)  # before the add: a failing add may leave half a request behind
                self._engine.add_request(rid, prompt, params)
                self._live[rid] = _Live(stream, TokenTimes(now))
        except BaseException:
            for rid in added:  # all or nothing, and nothing left behind
                self._live.pop(rid, None)
                try:
                    self._engine.abort(rid)
                except Exception:
                    log.debug("abort of %s after a failed add also failed", rid, exc_info=True)
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
            # A run of on-device decode steps hands its tokens over chunk by chunk: stream them as they come.
            self._engine.output_sink = self._dispatch
            # ... and ends early for requests queued to be added meanwhile, so their prompts start within a few steps
            self._engine.arrivals_waiting = lambda: self._adds_queued > 0
            self.tokenizer = copy.deepcopy(self._engine.tokenizer)
            self.tokenizers = TokenizerPool(self._engine.tokenizer, self._tokenizer_workers)
            self.limits = ModelLimits(vocab_size=int(self._engine.config.vocab_size),
                                      max_model_len=int(self._engine.max_model_len))
        except BaseException as exc:
            self._die("engine failed to load", exc)
            return
        finally:
            self._ready.set()
        self._publish_stats()
        try:
            while not self._stop.is_set():
                try:
                    self._drain(block=not self._engine.has_unfinished_requests())
                    if self._stop.is_set() or not self._engine.has_unfinished_requests():
                        continue
                    outputs = self._engine.step()
                except BaseException as exc:
                    self._die("engine step failed", exc)
                    return
                self._dispatch(outputs)
                self._publish_stats()
        finally:  # on this thread, which ran its steps: a tensor-parallel engine's workers end with it
            self._engine.close()

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
        generated = prompted = 0
        for out in outputs:
            live = self._live.get(out.request_id)
            if live is None:
                continue  # aborted meanwhile
            comp = out.outputs[0]
            n_total = len(comp.token_ids)
            new_ids = comp.token_ids[live.sent_tokens:]  # a slice of a list: a list of its own already
            new_lp = comp.logprobs[live.sent_tokens:] if comp.logprobs is not None else None
            first = live.sent_tokens == 0 and live.times.first_token is None
            live.times.observe(self.metrics, len(new_ids), now)
            generated += len(new_ids)
            if first:
                prompted += len(out.prompt_token_ids)
            live.sent_tokens = n_total
            error = getattr(out, "error", None)
            finish = comp.finish_reason if out.finished else None
            if out.finished and finish is None:
                finish = "error" if error else "stop"
            pending.add(live.stream, ChoiceEvent(
                request_id=out.request_id, text=comp.text, new_token_ids=new_ids, new_logprobs=new_lp,
                num_prompt_tokens=len(out.prompt_token_ids), num_output_tokens=n_total,
                finish_reason=finish, stop_reason=comp.stop_reason,
                prompt_token_ids=list(out.prompt_token_ids) if first else None,
                prompt_logprobs=list(out.prompt_logprobs) if first and out.prompt_logprobs is not None else None,
                error=(error or "the engine reported an error") if finish == "error" else None))
            if finish is not None:
                del self._live[out.request_id]
                self._release(1)
                self.metrics.e2e.observe(now - live.times.arrival)
                self.metrics.request_finished(finish)
        if generated:
            self.metrics.generation_tokens.inc(generated)
        if prompted:
            self.metrics.prompt_tokens.inc(prompted)
        pending.hand_over()

    def _publish_stats(self) -> None:
        try:
            s = self._engine.get_stats()
            self.metrics.set_engine_stats(s.num_running, s.num_waiting, s.kv_usage,
                                          (s.stream_hits, s.stream_compiles, s.stream_compile_seconds,
                                           s.stream_hosted, s.stream_background_compiles),
                                          s.num_preemptions, (s.decode_run_seconds, s.decode_run_idle_seconds),
                                          s.step_times)
        except Exception:  # stats are best-effort; never take the engine thread down for them
            log.debug("get_stats failed", exc_info=True)

    def _die(self, what: str, exc: BaseException) -> None:
        """Fatal: fail every in-flight request, log one line, tell the process (on_fatal)."""
        self.error = f"{what}: {type(exc).__name__}: {exc}"
        self._admitting = False
        log.error("%s; the server cannot generate any more", self.error)
        log.debug("engine failure traceback", exc_info=exc)
        err = EngineDeadError(self.error)
        streams = {id(live.stream): live.stream for live in self._live.values()}
        self._release(len(self._live))
        self._live.clear()
        for stream in streams.values():
            stream.loop.call_soon_threadsafe(stream._put, err)
        if self.on_fatal is not None:
            try:
                self.on_fatal(self.error)
            except Exception:
                log.exception("on_fatal callback failed")
