"""The serving engine in a process of its own (`megakernel serve`'s default; `--no-engine-process`: a thread instead).

Why: the server's event loop thread (HTTP, SSE chunks, socket writes) and the engine thread (scheduler, steps,
detokenizer, outputs) hold one GIL in turn, so one process serves at most 1 / (their CPU time per token) tokens a
second whatever the GPU does (docs/PERFORMANCE.md, "One server process is bound by its Python work per token"). Here
the engine runs in a spawned child that steps on its own; the server process keeps the event loop and a thin engine
thread that only hands outputs over.

The child (`run_engine_process`) loads the engine (`load_serving_engine`, the same load and warm-up as in-process
serving), then loops: run the commands the parent sent (add, abort, stop), step while requests run, and send each
step's outputs as deltas (new token ids, new logprobs, new text) with the engine's stats. A run of decode steps ends
early when a command is waiting on the pipe, as `arrivals_waiting` does in-process.

The parent side (`EngineProcessClient`) is what `server.async_engine.AsyncEngine` drives in place of an `LLMEngine`:
`add_request` sends without waiting (a request the engine still refuses after the server's checks finishes with
finish_reason "error": a 500 naming it, where in-process serving answers 400), `step` returns the next outputs the child
sent (rebuilt as `RequestOutput`s over per-request lists) or nothing after a short poll, so queued commands are not
held back. A child that fails sends one line and exits; one that dies makes the next call fail: both
end in AsyncEngine's fatal path.
"""
from __future__ import annotations

import atexit
import gc
import logging
import multiprocessing
import os
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from engine.outputs import CompletionOutput, RequestOutput
from server.log_setup import configure_logging

log = logging.getLogger(__name__)

_STEP_POLL_S = 0.001  # how long `step` waits for the child's outputs before letting queued commands through
_STOP_WAIT_S = 10.0


def load_serving_engine(model_dir: str, engine_kwargs: dict[str, Any], model_label: str, served_name: str,
                        url: str) -> Any:
    """An LLMEngine ready to serve: on the cuda backend its common step shapes' instruction streams are built first."""
    from engine import LLMEngine
    from engine.warm_up import warm_up

    engine = LLMEngine(model_dir, **engine_kwargs)
    if engine.backend_name == "cuda":  # its step shapes' instruction streams are built on first use
        log.info("warming up: throwaway requests (alone and several at once) build the instruction streams of "
                 "common step shapes")
        log.info("warmed up in %.1f s", warm_up(engine))
    # The process is named: with the engine in its own process (serve's default) the GPU is held by that one, not by
    # the server process uvicorn's "Started server process" line names.
    log.info("ready: %s (backend %s, max_model_len %d) as %r on %s (engine in process %d; %d objects kept out of "
             "garbage collection)", model_label, engine.backend_name, engine.max_model_len, served_name, url,
             os.getpid(), freeze_startup_heap())
    return engine


def freeze_startup_heap() -> int:
    """Move every object alive now (the modules, the engine, its weights' and streams' Python objects) out of the
    garbage collector's reach; returns how many. A serving step allocates enough to set off collections every few
    steps, and each full one walked this whole heap while holding the GIL: on the development CPU the engine's own
    work per token was 25.5-28.7 us with collections as they were, 18 with none, 15.6-28.3 after this."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass(frozen=True)
class EngineSpec:
    """What the child needs to load the engine (picklable: the child is a fresh interpreter)."""

    model_dir: str
    engine_kwargs: dict[str, Any]
    model_label: str
    served_name: str
    url: str
    log_level: str = "info"
    # Called in the child as loader(model_dir, engine_kwargs, model_label, served_name, url); a module-level function
    # (or a functools.partial of one) so the spec pickles: dev/serve_ceiling.py passes one whose backend only sleeps.
    loader: Callable[..., Any] = load_serving_engine


# A step's output for one request, as sent by the child: (request id, new token ids, new logprobs or None, new text,
# finished, finish reason, stop reason, error, prompt token ids and prompt logprobs (the first output only)).
Delta = tuple[str, list[int], "list[dict[int, float]] | None", str, bool, "str | None", "str | int | None",
              "str | None", "list[int] | None", "list[dict[int, float] | None] | None"]


class _Deltas:
    """Child side: what each request's outputs held at the last send, so each send carries only what is new."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[int, int]] = {}  # request id -> (tokens, characters of text) sent

    def of(self, out: RequestOutput) -> Delta:
        comp = out.outputs[0]
        first = out.request_id not in self._sent
        tokens, chars = self._sent.get(out.request_id, (0, 0))
        if out.finished:
            self._sent.pop(out.request_id, None)
        else:
            self._sent[out.request_id] = (len(comp.token_ids), len(comp.text))
        # Slices are copies already, and the output's own lists are the engine's copies (RequestState.to_output).
        return (out.request_id, comp.token_ids[tokens:],
                comp.logprobs[tokens:] if comp.logprobs is not None else None, comp.text[chars:],
                out.finished, comp.finish_reason, comp.stop_reason, out.error,
                out.prompt_token_ids if first else None, out.prompt_logprobs if first else None)

    def forget(self, request_id: str) -> None:
        self._sent.pop(request_id, None)


def run_engine_process(conn: Connection, spec: EngineSpec) -> None:
    """The child's whole life: load, then serve the parent's commands until "stop" or the pipe closes."""
    configure_logging(spec.log_level)
    try:
        engine = spec.loader(spec.model_dir, spec.engine_kwargs, spec.model_label, spec.served_name, spec.url)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the server with it
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    deltas = _Deltas()
    conn.send(("ready", engine.tokenizer, int(engine.config.vocab_size), int(engine.max_model_len),
               engine.backend_name))

    def send(outputs: list[RequestOutput]) -> None:
        if outputs:
            conn.send(("out", [deltas.of(o) for o in outputs], engine.get_stats()))

    engine.output_sink = send
    engine.arrivals_waiting = conn.poll  # a command waiting ends a run of decode steps early
    try:
        while True:
            if not engine.has_unfinished_requests():
                conn.poll(None)
            while conn.poll():
                msg = conn.recv()
                if msg[0] == "add":  # every request added since the parent's last step, all before this one
                    for rid, prompt, params in msg[1]:
                        refused = _add(engine, rid, prompt, params)
                        if refused is not None:
                            conn.send(("refused", rid, refused))
                elif msg[0] == "abort":
                    engine.abort(msg[1])
                    deltas.forget(msg[1])
                elif msg[0] == "stop":
                    return
            if engine.has_unfinished_requests():
                try:
                    send(engine.step())
                except Exception as exc:  # noqa: BLE001 - fatal: the parent fails every request with this line
                    conn.send(("fatal", f"engine step failed: {type(exc).__name__}: {exc}"))
                    return
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the server went away
    finally:
        engine.close()


def _add(engine: Any, request_id: str, prompt: Any, params: Any) -> tuple[str, str] | None:
    try:
        engine.add_request(request_id, prompt, params)
    except Exception as exc:  # noqa: BLE001 - the submitting request's error, not the engine's
        return (type(exc).__name__, str(exc))
    return None


@dataclass
class _Request:
    """Parent side: one running request's output so far (lists the rebuilt outputs share)."""

    prompt_token_ids: list[int] = field(default_factory=list)
    prompt_logprobs: list[dict[int, float] | None] | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    text: str = ""


class EngineProcessClient:
    """The engine a server's AsyncEngine drives, in a spawned child (see the module docstring). Not thread-safe: the
    AsyncEngine's engine thread is its only caller."""

    def __init__(self, spec: EngineSpec) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: CUDA is initialised in the child only
        self._conn, child = ctx.Pipe()
        # Not a daemon: a daemonic process may not start processes of its own, and the engine may (the cuda backend's
        # background stream compiles, engine/cuda/background_builds.py, fell back to the engine thread). It ends with the
        # server all the same: close() at the server's shutdown or this process's exit (registered below, so it runs
        # before multiprocessing's own exit hook joins the child), and the end of the pipe if this process dies.
        self._proc = ctx.Process(target=run_engine_process, args=(child, spec), name="megakernel-engine-process")
        self._proc.start()
        child.close()
        self._closed = False
        atexit.register(self.close)
        self._requests: dict[str, _Request] = {}
        self._adds: list[tuple[str, Any, Any]] = []  # added since the last step or abort (add_request)
        self._stats: Any = None
        self.output_sink: Any = None  # AsyncEngine sets these; the child streams runs and ends them early itself
        self.arrivals_waiting: Any = None
        msg = self._recv()
        if msg[0] != "ready":
            raise RuntimeError(f"the engine process sent {msg[0]!r} before it was ready")
        _, self.tokenizer, vocab_size, self.max_model_len, self.backend_name = msg
        self.config = types.SimpleNamespace(vocab_size=vocab_size)

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def add_request(self, request_id: str, prompt: Any, params: Any) -> None:
        """Queued, then sent with every other add before the next step or abort, in one message the child takes
        whole between its steps: all choices of a request (and requests added together) start in the same step, as
        in an engine of the server's process (otherwise the child could step between two choices' adds, and a
        streamed request's batches, hence its logprobs' last bits, would differ from the same request unstreamed).
        Not waited for: waiting would cost every arriving request up to a step. The server has checked the prompt
        as the engine does; a request the engine still refuses comes back as an output that finishes it with
        finish_reason "error"."""
        self._requests[request_id] = _Request()
        self._adds.append((request_id, prompt, params))

    def abort(self, request_id: str) -> bool:
        self._send_adds()
        self._send(("abort", request_id))
        return self._requests.pop(request_id, None) is not None

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def step(self) -> list[RequestOutput]:
        self._send_adds()
        if not self._conn.poll(_STEP_POLL_S):
            return []
        msg = self._recv()
        if msg[0] == "refused":
            _, rid, (kind, text) = msg
            deltas = [(rid, [], None, "", True, "error", None, f"the engine refused the request: {kind}: {text}",
                       [], None)]
        else:
            _, deltas, self._stats = msg
        return [out for d in deltas if (out := self._output(d)) is not None]

    def get_stats(self) -> Any:
        if self._stats is None:
            raise LookupError("no step has run in the engine process yet")
        return self._stats

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        try:
            self._conn.send(("stop",))
        except (OSError, ValueError):
            pass  # the child is gone already
        self._proc.join(_STOP_WAIT_S)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()

    def _send_adds(self) -> None:
        if self._adds:
            self._send(("add", self._adds))
            self._adds = []

    def _send(self, msg: tuple[Any, ...]) -> None:
        try:
            self._conn.send(msg)
        except OSError:
            pass  # the child is gone: the next step reads the pipe's end and reports its exit

    def _recv(self) -> tuple[Any, ...]:
        try:
            msg: tuple[Any, ...] = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(1.0)
            raise RuntimeError(f"the engine process exited (exit code {self._proc.exitcode})") from None
        if msg[0] == "fatal":
            raise RuntimeError(msg[1])
        return msg

    def _output(self, d: Delta) -> RequestOutput | None:
        rid, new_ids, new_lp, new_text, finished, finish, stop, error, prompt_ids, prompt_lp = d
        req = self._requests.get(rid)
        if req is None:
            return None  # aborted here while the child ran its step
        if prompt_ids is not None:
            req.prompt_token_ids, req.prompt_logprobs = prompt_ids, prompt_lp
        req.token_ids.extend(new_ids)
        if new_lp is not None:
            if req.logprobs is None:
                req.logprobs = []
            req.logprobs.extend(new_lp)
        req.text += new_text
        if finished:
            del self._requests[rid]
        return RequestOutput(request_id=rid, prompt=None, prompt_token_ids=req.prompt_token_ids,
                             outputs=[CompletionOutput(index=0, text=req.text, token_ids=req.token_ids,
                                                       logprobs=req.logprobs, finish_reason=finish,
                                                       stop_reason=stop)],
                             finished=finished, error=error, prompt_logprobs=req.prompt_logprobs)
