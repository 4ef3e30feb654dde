"""FastAPI app factory for the OpenAI-compatible server.

`build_app(engine_or_async_engine, ...)` wires the routes, auth, errors, body-size limit and metrics
around one `AsyncEngine`; the app's lifespan starts the engine thread and stops it on shutdown.
Everything per-server (metrics registry, engine, key) hangs off the app, never module globals, so a
process can host several apps (the tests do).
"""
from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from server.async_engine import AsyncEngine
from server.body_limit import BodyLimitMiddleware
from server.errors import (APIError, bad_request, engine_dead, error_response, install_error_handlers, not_ready,
                           shutting_down, unauthorized)
from server.metrics import CONTENT_TYPE
from server.openapi_errors import declare_openai_errors
from server.params import chat_messages, check_model
from server.prompts import chat_prompt, check_token_ids
from server.protocol import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest, ModelCard,
                             ModelList, TokenizeRequest)
from server.serve_options import DEFAULT_MAX_PENDING, DEFAULT_MAX_REQUEST_BYTES
from server.serving_chat import create_chat_completion
from server.serving_completion import create_completion

VERSION = "0.1.0"


def build_app(engine_or_async_engine: Any, served_model_name: str | None = None, api_key: str | None = None,
              *, max_pending: int = DEFAULT_MAX_PENDING, cors_origins: Sequence[str] = (),
              max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    """An app serving `engine_or_async_engine` (an LLMEngine, or an AsyncEngine that may still be
    loading). `max_pending` bounds in-flight engine requests (running + waiting); beyond it → 503.
    `cors_origins` empty: no CORS headers at all (browsers on other origins are refused)."""
    if isinstance(engine_or_async_engine, AsyncEngine):
        aeng = engine_or_async_engine
        if served_model_name is not None:
            aeng.served_model_name = served_model_name
    else:
        aeng = AsyncEngine(engine_or_async_engine, served_model_name=served_model_name or "model",
                           max_pending=max_pending)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        aeng.start()
        try:
            yield
        finally:
            aeng.shutdown()

    app = FastAPI(title="megakernel OpenAI-compatible server", version=VERSION, lifespan=lifespan)
    app.state.async_engine = aeng
    install_error_handlers(app)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["*"],
                           allow_headers=["*"])
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_request_bytes)  # outermost: before any parsing

    async def authorized(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise unauthorized()

    def unavailable() -> APIError | None:
        if aeng.error is not None:
            return engine_dead()
        if not aeng.is_admitting:
            return shutting_down()
        if not aeng.is_ready:
            return not_ready()
        return None

    async def ready() -> AsyncEngine:
        err = unavailable()
        if err is not None:
            raise err
        return aeng

    guarded = [Depends(authorized)]

    @app.post("/v1/completions", dependencies=guarded)
    async def completions(req: CompletionRequest, request: Request, eng: AsyncEngine = Depends(ready)) -> Any:
        return await create_completion(req, request, eng)

    @app.post("/v1/chat/completions", dependencies=guarded)
    async def chat(req: ChatCompletionRequest, request: Request, eng: AsyncEngine = Depends(ready)) -> Any:
        return await create_chat_completion(req, request, eng)

    @app.get("/v1/models", dependencies=guarded)
    async def models() -> Any:
        max_len = aeng.limits.max_model_len if aeng.limits is not None else None
        card = ModelCard(id=aeng.served_model_name, root=aeng.served_model_name, max_model_len=max_len)
        return ModelList(data=[card]).model_dump()

    @app.get("/health")
    async def health() -> Response:
        err = unavailable()
        return JSONResponse({"status": "ok"}) if err is None else error_response(err)

    # One route per method: a shared route gives both methods the same OpenAPI operationId, which the
    # spec forbids and client generators reject.
    @app.get("/ping", operation_id="ping_get")
    @app.post("/ping", operation_id="ping_post")
    async def ping() -> Response:
        return await health()

    @app.get("/version")
    async def version() -> Any:
        return {"version": VERSION}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(aeng.metrics.render(), media_type=CONTENT_TYPE)

    @app.post("/tokenize", dependencies=guarded)
    async def tokenize(req: TokenizeRequest, eng: AsyncEngine = Depends(ready)) -> Any:
        check_model(req.model, eng.served_model_name)
        assert eng.tokenizers is not None and eng.limits is not None
        if (req.prompt is None) == (req.messages is None):
            raise bad_request("pass exactly one of prompt or messages", "prompt")
        if req.messages is not None:
            msgs = chat_messages(ChatCompletionRequest(messages=req.messages))
            tokens = (await chat_prompt(msgs, eng.tokenizers, eng.limits, check_fit=False)).token_ids
        else:
            tokens = await eng.tokenizers.encode(req.prompt, add_special_tokens=req.add_special_tokens)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": eng.limits.max_model_len}

    @app.post("/detokenize", dependencies=guarded)
    async def detokenize(req: DetokenizeRequest, eng: AsyncEngine = Depends(ready)) -> Any:
        check_model(req.model, eng.served_model_name)
        assert eng.tokenizers is not None and eng.limits is not None
        ids = check_token_ids(req.tokens, eng.limits, "tokens")
        return {"prompt": await eng.tokenizers.decode(ids)}

    declare_openai_errors(app)
    return app
