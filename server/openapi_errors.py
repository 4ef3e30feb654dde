"""The OpenAPI document says what the server answers for a request it refuses: 400 with an OpenAI-shaped
error body (server/errors.py turns FastAPI's validation failures into that), not FastAPI's default 422."""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from server.protocol import ErrorResponse

_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
_BAD_REQUEST = {"description": "Bad request: one field named in an OpenAI-shaped error",
                "content": {"application/json": {"schema": _ERROR_REF}}}


def openai_error_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (an OpenAPI document) with every 422 response declared as the 400 the server sends."""
    for methods in schema.get("paths", {}).values():
        for op in methods.values():
            responses = op.get("responses", {})
            if "422" in responses:
                del responses["422"]
                responses["400"] = _BAD_REQUEST
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in error_schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas["ErrorResponse"] = error_schema
    return schema


def declare_openai_errors(app: FastAPI) -> None:
    """Serve `openai_error_schema` of the app's generated document at /openapi.json (built once)."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openai_error_schema(get_openapi(title=app.title, version=app.version,
                                                                 routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
