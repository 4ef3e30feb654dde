"""How the engine thread's events reach a request's reader (server/request_stream.py, server/async_engine.py): a reader
that fell behind takes every queued batch in one read, in order, an error after them at its next read; one engine step
wakes each event loop once, whatever the number of streams."""
from __future__ import annotations

import asyncio

import pytest

from server.async_engine import _Pending
from server.request_stream import ChoiceEvent, EngineDeadError, RequestStream


def _event(rid: str, token: int, finish: str | None = None) -> ChoiceEvent:
    return ChoiceEvent(request_id=rid, text="", new_token_ids=[token], new_logprobs=None, num_prompt_tokens=1,
                       num_output_tokens=1, finish_reason=finish, stop_reason=None)


def test_a_reader_behind_takes_every_queued_batch_in_order() -> None:
    async def go() -> None:
        stream = RequestStream(["a"])
        stream._put([_event("a", 1)])
        stream._put([_event("a", 2), _event("a", 3)])
        got = await stream.get(1.0)
        assert [e.new_token_ids[0] for e in got] == [1, 2, 3]
        stream._put([_event("a", 4, "length")])
        assert [e.new_token_ids[0] for e in await stream.get(1.0)] == [4] and stream.finished

    asyncio.run(go())


def test_an_error_behind_events_comes_at_the_next_read() -> None:
    async def go() -> None:
        stream = RequestStream(["a"])
        stream._put([_event("a", 1)])
        stream._put(EngineDeadError("gone"))
        stream._put([_event("a", 2)])  # never read: the error ends the stream
        assert [e.new_token_ids[0] for e in await stream.get(1.0)] == [1]
        with pytest.raises(EngineDeadError):
            await stream.get(1.0)
        assert stream.finished

    asyncio.run(go())


def test_one_step_wakes_each_event_loop_once() -> None:
    class CountingLoop:
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def call_soon_threadsafe(self, fn, *args) -> None:  # noqa: ANN001
            self.calls.append((fn, args))

    async def go() -> None:
        loops = [CountingLoop(), CountingLoop()]
        streams = [RequestStream([f"r{i}"]) for i in range(5)]
        for i, s in enumerate(streams):
            s.loop = loops[i % 2]  # type: ignore[assignment]
        pending = _Pending()
        for i, s in enumerate(streams):
            pending.add(s, _event(f"r{i}", i))
        pending.hand_over()
        assert [len(lp.calls) for lp in loops] == [1, 1]
        for lp in loops:
            fn, args = lp.calls[0]
            fn(*args)
        for i, s in enumerate(streams):
            assert [e.new_token_ids[0] for e in await s.get(1.0)] == [i]

    asyncio.run(go())
