"""uvicorn with a drain: how `megakernel serve` stops.

SIGTERM stops admitting (new generation requests and /health answer 503 "shutting_down"), lets the
running requests finish for up to `shutdown_timeout` seconds, then ends the streams still running
with an OpenAI-shaped error event (and [DONE]) and exits 0. SIGINT (Ctrl-C) does the same without
the wait; a second SIGINT cuts a SIGTERM drain short, a third forces the exit. Nothing is cancelled
mid-response, so no CancelledError tracebacks; and the signal is not re-raised after the shutdown
(uvicorn's default), so the exit status is the server's own.

A fatal engine error sets `should_exit` from the engine thread (`on_engine_fatal`); the exit status
is then 1 (the caller reads `AsyncEngine.error`).
"""
from __future__ import annotations

import logging
import signal
import time
from types import FrameType

import uvicorn

from server.async_engine import AsyncEngine
from server.request_stream import ShuttingDownError

log = logging.getLogger(__name__)

# After the deadline, how long cut streams get to write their error event before uvicorn closes them.
_FLUSH_S = 2.0


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, aeng: AsyncEngine, shutdown_timeout: float):
        super().__init__(config)
        self.aeng = aeng
        self.shutdown_timeout = shutdown_timeout
        self._deadline: float | None = None  # set by the first signal
        self._cut_at: float | None = None
        self._announced = False

    def on_engine_fatal(self, _message: str) -> None:
        self.should_exit = True  # read by uvicorn's main loop every 0.1 s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs as a signal handler on the event-loop thread: set flags only (no logging, no awaiting).
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + (self.shutdown_timeout if sig == signal.SIGTERM else 0.0)
            self.aeng.stop_admitting()
        elif sig == signal.SIGINT:
            if self._deadline <= now:
                self.force_exit = True
                self.should_exit = True
            self._deadline = now

    async def on_tick(self, counter: int) -> bool:
        if self._deadline is not None and not self.should_exit:
            self._drain()
        return await super().on_tick(counter)

    def _drain(self) -> None:
        now = time.monotonic()
        pending = self.aeng.num_pending
        if not self._announced:
            self._announced = True
            log.info("shutting down: no new requests; %d generation(s) running, waiting up to %.0f s",
                     pending, max(0.0, self._deadline - now) if self._deadline is not None else 0.0)
        if pending == 0:
            self.should_exit = True
            return
        assert self._deadline is not None
        if now >= self._deadline:
            ended = self.aeng.fail_streams(ShuttingDownError("the server is shutting down"))
            if self._cut_at is None:
                self._cut_at = now
                log.info("shutting down: ended %d request(s) still running", ended)
            elif now - self._cut_at > _FLUSH_S:
                self.should_exit = True  # uvicorn's own graceful timeout covers what is left
