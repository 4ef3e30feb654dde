"""The serving engine in a process of its own (`megakernel serve`'s default; `--no-engine-process`: a thread instead).

Why: the server's event loop thread (HTTP, SSE chunks, socket writes) and the engine thread (scheduler, steps,
detokenizer, outputs) hold one GIL in turn, so one process serves at most 1 / (their CPU time per token) tokens a
second whatever the GPU does (docs/PERFORMANCE.md, "One server process is bound by its Python work per token"). Here
the engine runs in a spawned child that steps on its own; the server process keeps the event loop and a thin engine
thread that only hands outputs over.

The child (server/engine_child.py) loads the engine as in-process serving does (server/serving_engine.py), steps it
and sends each step's outputs back as deltas.

The parent side (`EngineProcessClient`) is what `server.async_engine.AsyncEngine` drives in place of an `LLMEngine`:
`add_request` sends without waiting (a request the engine still refuses after the server's checks finishes with
finish_reason "error": a 500 naming it, where in-process serving answers 400), `step` returns the next outputs the child
sent (rebuilt as `RequestOutput`s over per-request lists) or nothing after a short poll, so queued commands are not
held back. A child that fails sends one line and exits; one that dies makes the next call fail: both
end in AsyncEngine's fatal path.
"""
from __future__ import annotations

import atexit
import multiprocessing
import types
from dataclasses import dataclass, field
from typing import Any

from engine.outputs import CompletionOutput, RequestOutput
from server.engine_child import Delta, run_engine_process
from server.serving_engine import EngineSpec

_STEP_POLL_S = 0.001  # how long `step` waits for the child's outputs before letting queued commands through
_STOP_WAIT_S = 10.0


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
