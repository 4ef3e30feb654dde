"""A cap on request body size, enforced before anything parses the body.

Both ways a client can send a body are covered: a declared Content-Length over the limit is refused
before a byte is read, and a chunked body is counted as it streams in and refused the moment it
passes the limit (FastAPI turns the HTTPException raised from `receive` into the app's 413 error).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from fastapi import HTTPException

from server.errors import error_response, request_too_large
from server.serve_options import DEFAULT_MAX_REQUEST_BYTES

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES):
        if max_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await error_response(request_too_large(self.max_bytes))(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, request_too_large(self.max_bytes).message)
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP server rejects malformed lengths itself
    return None
