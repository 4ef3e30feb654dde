"""What the engine thread hands to the event loop: per-step `ChoiceEvent`s delivered into one
`RequestStream` per HTTP request, plus the errors the bridge raises."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Sequence


class QueueFullError(RuntimeError):
    """Too many requests are already queued; the caller should answer 503."""


class EngineDeadError(RuntimeError):
    """The engine failed to load or crashed in step(); nothing more can be served."""


class ShuttingDownError(RuntimeError):
    """The server is draining for shutdown: no new requests, and running ones past the deadline end."""


@dataclass(frozen=True)
class ChoiceEvent:
    """What changed for one engine request in one step."""

    request_id: str
    text: str  # cumulative visible text (only grows)
    new_token_ids: list[int]
    new_logprobs: list[dict[int, float]] | None
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: str | None  # "error": this request failed inside a step (the engine goes on)
    stop_reason: str | int | None
    prompt_token_ids: list[int] | None = None  # only on the request's first event
    prompt_logprobs: list[dict[int, float] | None] | None = None  # only on the first event, when asked for
    error: str | None = None  # why, when finish_reason is "error" (for the log, never the client)


class RequestStream:
    """The asyncio side of one HTTP request's engine requests (n choices x prompts)."""

    def __init__(self, request_ids: Sequence[str]):
        self.request_ids = list(request_ids)
        self._queue: asyncio.Queue[list[ChoiceEvent] | BaseException] = asyncio.Queue()
        self._unfinished = set(self.request_ids)
        self.failed = False  # fail() was called: the reader gets (or got) the error
        self._held: BaseException | None = None  # an error queued behind events a get() returned
        self.loop = asyncio.get_running_loop()

    @property
    def finished(self) -> bool:
        return not self._unfinished

    def _put(self, item: list[ChoiceEvent] | BaseException) -> None:
        self._queue.put_nowait(item)

    def fail(self, exc: BaseException) -> None:
        """End the stream with `exc` (event-loop thread only)."""
        self.failed = True
        self._queue.put_nowait(exc)

    async def get(self, timeout: float | None = None) -> list[ChoiceEvent]:
        """Every batch of events queued since the last call, in order, once there is one (raises the engine's error,
        or TimeoutError after `timeout`). A reader that fell behind takes all it missed in one call, so its
        response writes them together."""
        if self._held is not None:
            item, self._held = self._held, None
        else:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        events: list[ChoiceEvent] = []
        while True:
            if isinstance(item, BaseException):
                if events:  # the events queued before the error first, the error at the next call
                    self._held = item
                    break
                self._unfinished.clear()
                raise item
            events.extend(item)
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
        for ev in events:
            if ev.finish_reason is not None:
                self._unfinished.discard(ev.request_id)
        return events
