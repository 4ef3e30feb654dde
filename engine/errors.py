"""The two ways the engine refuses work: a bad request (the caller's fault, the engine is unharmed) and a
fatal step failure (the engine's state can no longer be trusted).

A server maps `RequestError` to a 400 for that one request and keeps serving; `EngineFatalError` means
every in-flight request is lost and the process should fail them and exit.
"""
from __future__ import annotations


class RequestError(ValueError):
    """Something the caller sent is wrong (prompt, sampling parameters, request id). Raised before the
    request touches any shared engine state, so the engine is exactly as it was before the call.
    The message starts with the offending field's name."""


class EngineFatalError(RuntimeError):
    """A step failed in a way that cannot be traced to one request (the backend's forward, the
    scheduler's bookkeeping). The message names the step and the cause; `__cause__` holds the original."""
