"""FastAPI app factory for the OpenAI-compatible server.

`build_app(engine_or_async_engine, ...)` wires the routes, auth, errors and metrics around one
`AsyncEngine`; the app's lifespan starts the engine thread and stops it on shutdown. Everything
per-server (metrics registry, engine, key) hangs off the app, never module globals, so a process can
host several apps (the tests do).
"""
from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from server.async_engine import AsyncEngine
from server.errors import APIError, bad_request, error_response, install_error_handlers, not_ready, unauthorized
from server.metrics import CONTENT_TYPE
from server.params import chat_messages, check_model
from server.protocol import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest, ModelCard,
                             ModelList, TokenizeRequest)
from server.serving_chat import create_chat_completion
from server.serving_completion import create_completion

VERSION = "0.1.0"


def build_app(engine_or_async_engine: Any, served_model_name: str | None = None, api_key: str | None = None,
              *, max_pending: int = 1024, cors_origins: Sequence[str] = ("*",)) -> FastAPI:
    """An app serving `engine_or_async_engine` (an LLMEngine, or an AsyncEngine that may still be
    loading). `max_pending` bounds in-flight engine requests (running + waiting); beyond it → 503."""
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

    async def authorized(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise unauthorized()

    async def ready() -> AsyncEngine:
        if not aeng.is_ready:
            if aeng.error is not None:
                raise APIError(aeng.error, 503, "service_unavailable", None, "engine_dead")
            raise not_ready()
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
        max_len = aeng.engine.max_model_len if aeng.is_ready else None
        card = ModelCard(id=aeng.served_model_name, root=aeng.served_model_name, max_model_len=max_len)
        return ModelList(data=[card]).model_dump()

    @app.get("/health")
    async def health() -> Response:
        if aeng.is_ready:
            return JSONResponse({"status": "ok"})
        if aeng.error is not None:
            return error_response(APIError(aeng.error, 503, "service_unavailable", None, "engine_dead"))
        return error_response(not_ready())

    @app.api_route("/ping", methods=["GET", "POST"])
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
        if (req.prompt is None) == (req.messages is None):
            raise bad_request("pass exactly one of prompt or messages", "prompt")
        if req.messages is not None:
            msgs = chat_messages(ChatCompletionRequest(messages=req.messages))
            try:
                tokens = await eng.call(lambda e: e.apply_chat_template(msgs))
            except ValueError as exc:
                raise bad_request(f"messages: {exc}", "messages") from None
        else:
            tokens = list(eng.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens))
        return {"tokens": tokens, "count": len(tokens), "max_model_len": eng.engine.max_model_len}

    @app.post("/detokenize", dependencies=guarded)
    async def detokenize(req: DetokenizeRequest, eng: AsyncEngine = Depends(ready)) -> Any:
        check_model(req.model, eng.served_model_name)
        vocab = eng.engine.config.vocab_size
        bad = [t for t in req.tokens if not 0 <= t < vocab]
        if bad:
            raise bad_request(f"token ids must be in [0, {vocab}); got {bad[:5]}", "tokens")
        return {"prompt": eng.tokenizer.decode(req.tokens)}

    return app
