"""Shared machinery of the generation endpoints: submitting a fan-out of engine requests, reading
their events with disconnect detection, and per-choice bookkeeping for deltas and usage.

Failures after submission become OpenAI errors here: a request the engine failed (finish_reason
"error") is a 500 naming a request id, a dead engine a 500 with code "engine_dead", a shutdown past
its deadline a 503 "shutting_down"; streams get the same body as an error event before [DONE]."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, Sequence

from fastapi import Request

from server.async_engine import AsyncEngine
from server.errors import (APIError, bad_request, engine_dead, internal_error, not_ready, overloaded,
                           shutting_down)
from server.params import engine_error_param
from server.prompts import PreparedPrompt
from server.protocol import Usage
from server.request_stream import ChoiceEvent, EngineDeadError, QueueFullError, RequestStream, ShuttingDownError

_DISCONNECT_POLL_S = 0.5  # non-streaming requests: how often to check whether the client left


@dataclass
class ChoiceState:
    """Everything the server accumulates for one choice (one engine request)."""

    index: int
    prompt_index: int
    text: str = ""
    sent_chars: int = 0  # how much of `text` has been streamed
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    num_prompt_tokens: int = 0
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None  # with echo + logprobs (completions)
    finish_reason: str | None = None
    stop_reason: str | int | None = None

    def apply(self, ev: ChoiceEvent) -> tuple[str, list[int], list[dict[int, float]]]:
        """Fold an event in; return (new text, new token ids, new logprobs) since the last call."""
        self.text = ev.text
        delta = self.text[self.sent_chars:]
        self.sent_chars = len(self.text)
        self.token_ids.extend(ev.new_token_ids)
        new_lp = ev.new_logprobs or []
        self.logprobs.extend(new_lp)
        self.num_prompt_tokens = ev.num_prompt_tokens
        if ev.prompt_token_ids is not None:
            self.prompt_token_ids = ev.prompt_token_ids
        if ev.prompt_logprobs is not None:
            self.prompt_logprobs = ev.prompt_logprobs
        self.finish_reason = ev.finish_reason
        self.stop_reason = ev.stop_reason
        return delta, ev.new_token_ids, new_lp


class Generation:
    """One HTTP request's engine requests: request id -> ChoiceState, and an event reader that
    aborts whatever is unfinished when the reader stops early (disconnect, error, cancellation)."""

    def __init__(self, aeng: AsyncEngine, base_id: str, n: int, num_prompts: int):
        self.aeng = aeng
        self.base_id = base_id
        self.choices: dict[str, ChoiceState] = {}
        for p in range(num_prompts):
            for i in range(n):
                idx = p * n + i
                self.choices[f"{base_id}-{idx}"] = ChoiceState(index=idx, prompt_index=p)
        self.stream: RequestStream | None = None
        self._last_poll = 0.0

    async def submit(self, prompts: Sequence[PreparedPrompt], params: Sequence[Sequence[Any]]) -> None:
        """params[p][i]: the SamplingParams of prompt p's choice i."""
        reqs = []
        for rid, c in self.choices.items():
            choice = c.index - c.prompt_index * len(params[c.prompt_index])
            reqs.append((rid, prompts[c.prompt_index].engine_input(), params[c.prompt_index][choice]))
        try:
            self.stream = await self.aeng.submit(reqs)
        except QueueFullError as exc:
            raise overloaded(str(exc)) from None
        except ShuttingDownError:
            raise shutting_down() from None
        except EngineDeadError:
            raise (engine_dead() if self.aeng.error is not None else not_ready()) from None
        except ValueError as exc:
            raise bad_request(str(exc), engine_error_param(str(exc))) from None

    async def next_events(self, http: Request | None) -> list[ChoiceEvent] | None:
        """The next events, or None when every choice has finished. With `http`, checks for a client
        disconnect at least every _DISCONNECT_POLL_S, busy or not (streaming responses get
        cancelled by Starlette instead)."""
        assert self.stream is not None
        loop = asyncio.get_running_loop()
        while not self.stream.finished:
            if http is not None and loop.time() - self._last_poll >= _DISCONNECT_POLL_S:
                self._last_poll = loop.time()
                if await http.is_disconnected():
                    self.abort()
                    return None
            try:
                events = await self.stream.get(_DISCONNECT_POLL_S if http is not None else None)
            except (TimeoutError, asyncio.TimeoutError):
                continue
            except EngineDeadError:
                raise APIError("internal server error: the engine failed while generating; the server is "
                               "stopping (see the server log)", 500, "internal_server_error", None,
                               "engine_dead") from None
            except ShuttingDownError:
                raise shutting_down() from None
            for ev in events:
                if ev.finish_reason == "error":
                    raise internal_error(f"the engine failed request {ev.request_id}: {ev.error}")
            return events
        return None

    def abort(self) -> None:
        if self.stream is not None and not self.stream.finished:
            self.aeng.abort(self.stream.request_ids)

    def usage(self) -> Usage:
        per_prompt: dict[int, int] = {}
        for c in self.choices.values():
            per_prompt[c.prompt_index] = c.num_prompt_tokens  # n choices share one prompt: count once
        prompt = sum(per_prompt.values())
        completion = sum(len(c.token_ids) for c in self.choices.values())
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)

    async def collect(self, http: Request | None) -> None:
        """Run every choice to completion (non-streaming)."""
        try:
            while (events := await self.next_events(http)) is not None:
                for ev in events:
                    self.choices[ev.request_id].apply(ev)
        finally:
            self.abort()


def sse(obj: Any) -> str:
    payload = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return f"data: {payload}\n\n"


_TEXT_MARK = "\x00megakernel-chunk-text\x00"  # a string no token's text is compared with: only its encoding is
_TEXT_MARK_JSON = json.dumps(_TEXT_MARK, ensure_ascii=False)


class ChunkTemplates:
    """One stream's SSE chunks that differ only in a token's text: each distinct rest (`key`) is rendered by
    `sse(chunk(mark))` once and split at the mark, later chunks splice the text's JSON encoding in. The same bytes as
    `sse(chunk(text))`, for about 0.3 us instead of 8 a token: the event loop's work per streamed token bounds a
    server's output tok/s (docs/PERFORMANCE.md, "What the host side costs")."""

    def __init__(self) -> None:
        self._parts: dict[Hashable, tuple[str, str]] = {}

    def render(self, key: Hashable, text: str, chunk: Callable[[str], Any]) -> str:
        parts = self._parts.get(key)
        if parts is None:
            head, mark, tail = sse(chunk(_TEXT_MARK)).partition(_TEXT_MARK_JSON)
            if not mark:  # the chunk does not hold the text where a template can splice it
                return sse(chunk(text))
            parts = self._parts[key] = (head, tail)
        return parts[0] + encode_basestring(text) + parts[1]


class StreamGate:
    """When a stream's pending chunks are written (`--stream-interval`, as vLLM's): the first token's at once (time to
    first token), then once `interval` tokens have gathered since the last write, and whenever a choice finishes. Each
    write is a socket send, whose cost on the event loop's thread is per write, not per byte: at high concurrency an
    interval of a few tokens takes most of the event loop's work per token away, at the price of a burstier stream."""

    def __init__(self, interval: int) -> None:
        self._interval = interval
        self._tokens = 0
        self._first = True
        self._finished = False

    def add(self, tokens: int, finished: bool) -> None:
        self._tokens += tokens
        self._finished = self._finished or finished

    def due(self) -> bool:
        wanted = 1 if self._first else self._interval
        if self._interval > 1 and not self._finished and self._tokens < wanted:
            return False
        if self._tokens:
            self._first = False
        self._tokens = 0
        self._finished = False
        return True


def write_together(chunks: list[str]) -> str:
    """The SSE chunks of one read of a request's stream as one body write, emptying `chunks`: a reader behind the
    engine (a run of decode steps hands over several steps at once) sends the same bytes in one socket write
    instead of one per chunk."""
    body = "".join(chunks)
    chunks.clear()
    return body


SSE_DONE = "data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def stream_error(exc: BaseException) -> str:
    """The error event of a stream whose status line is already sent."""
    err = exc if isinstance(exc, APIError) else internal_error(f"{type(exc).__name__} while streaming", exc)
    return sse(json.dumps(err.body(), separators=(",", ":"), ensure_ascii=True))
