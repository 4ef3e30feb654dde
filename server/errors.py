"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the right status.

Every failure path of the server ends here, so a bad request never kills the process and clients
(the `openai` package maps status codes to exception classes) see what they expect. A 500 never
carries internal exception text: it names a request id, and the log holds the details under it.
"""
from __future__ import annotations

import json
import logging
import uuid
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.protocol import ErrorInfo, ErrorResponse

log = logging.getLogger(__name__)


class APIError(Exception):
    """Raised anywhere in a handler; turned into an OpenAI error body by the app's handler."""

    def __init__(self, message: str, status: int = 400, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        info = ErrorInfo(message=self.message, type=self.type, param=self.param, code=self.code)
        return ErrorResponse(error=info).model_dump()


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(message, 400, "invalid_request_error", param, code)


def model_not_found(requested: str, served: str) -> APIError:
    return APIError(f"the model {requested!r} does not exist; this server serves {served!r}", 404,
                    "invalid_request_error", "model", "model_not_found")


def request_too_large(limit: int) -> APIError:
    return APIError(f"the request body exceeds this server's limit of {limit} bytes (--max-request-bytes)",
                    413, "invalid_request_error", None, "request_too_large")


def overloaded(message: str) -> APIError:
    return APIError(message, 503, "server_overloaded", None, "server_overloaded")


def not_ready() -> APIError:
    return APIError("the model is still loading; retry when /health answers 200", 503,
                    "service_unavailable", None, "model_loading")


def engine_dead() -> APIError:
    return APIError("the engine has failed and this server cannot generate any more (see the server log)",
                    503, "service_unavailable", None, "engine_dead")


def shutting_down() -> APIError:
    return APIError("the server is shutting down; retry on another instance", 503, "service_unavailable",
                    None, "shutting_down")


def unauthorized() -> APIError:
    return APIError("invalid or missing API key (send 'Authorization: Bearer <key>')", 401,
                    "invalid_request_error", None, "invalid_api_key")


def internal_error(detail: str, exc: BaseException | None = None, code: str | None = None) -> APIError:
    """A 500 whose body names only a fresh request id; `detail` (and the traceback of `exc`) go to
    the log under that id."""
    request_id = f"req-{uuid.uuid4().hex[:16]}"
    log.error("request %s failed: %s", request_id, detail, exc_info=exc)
    return APIError(f"internal server error (request id {request_id})", 500, "internal_server_error", None,
                    code)


class ASCIIJSONResponse(JSONResponse):
    """Escapes everything outside ASCII, so an error that quotes client input (a lone surrogate
    included) always serialises."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(err: APIError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return ASCIIJSONResponse(err.body(), status_code=err.status, headers=headers)


def _param_of(loc: tuple[Any, ...]) -> str | None:
    # FastAPI locations look like ("body", "messages", 0, "content"); OpenAI names the field path.
    # pydantic adds union-branch tags ("str", "list[int]", "TextPart"): stop at the first one.
    parts: list[str] = []
    for p in loc:
        s = str(p)
        if p == "body" and not parts:
            continue
        if isinstance(p, str) and (s in _TYPE_TAGS or "[" in s or "-" in s or s[:1].isupper()):
            break
        parts.append(s)
    return ".".join(parts) if parts else None


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errs = exc.errors()
    if not errs:
        return "invalid request", None
    first = errs[0]
    if first.get("type") == "json_invalid":
        return f"malformed JSON body: {first.get('msg', '')}".strip(), None
    param = _param_of(tuple(first.get("loc", ())))
    msgs = []
    for e in errs[:5]:
        where = _param_of(tuple(e.get("loc", ()))) or "body"
        msgs.append(f"{where}: {e.get('msg', 'invalid value')}")
    return "; ".join(msgs), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_req: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(bad_request(message, param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 413:
            return error_response(APIError(str(exc.detail), 413, "invalid_request_error", None,
                                           "request_too_large"))
        try:
            phrase = HTTPStatus(exc.status_code).phrase
        except ValueError:
            phrase = "error"
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = exc.detail if isinstance(exc.detail, str) else phrase
        return error_response(APIError(message, exc.status_code, kind))

    @app.exception_handler(Exception)
    async def _internal(req: Request, exc: Exception) -> JSONResponse:
        return error_response(internal_error(f"unhandled {type(exc).__name__} in {req.url.path}", exc))
