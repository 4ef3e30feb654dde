"""POST /v1/completions: legacy text completions, streaming (SSE) or not."""
from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.async_engine import AsyncEngine
from server.logprobs import TokenText, completion_logprobs
from server.params import check_model, completion_checks, completion_prompts, sampling_params
from server.protocol import CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse
from server.serving_common import SSE_DONE, SSE_HEADERS, ChoiceState, Generation, sse, stream_error


async def create_completion(req: CompletionRequest, http: Request, aeng: AsyncEngine) -> Any:
    check_model(req.model, aeng.served_model_name)
    completion_checks(req)
    prompts = completion_prompts(req)
    engine_cfg = aeng.engine.config
    params = sampling_params(req, req.max_tokens, req.logprobs, engine_cfg.vocab_size)
    gen = Generation(aeng, f"cmpl-{uuid.uuid4().hex}", req.n, len(prompts))
    await gen.submit(prompts, params)
    echo = _echo_texts(prompts, aeng) if req.echo else None
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        body = _stream(gen, req, echo, include_usage, aeng)
        return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
    await gen.collect(http)
    text = TokenText(aeng.tokenizer)
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        prefix = echo[c.prompt_index] if echo else ""
        lp = None
        if req.logprobs is not None:
            lp = CompletionLogprobs()
            completion_logprobs(lp, c.token_ids, c.logprobs, req.logprobs, text, len(prefix))
        choices.append(CompletionChoice(index=c.index, text=prefix + c.text, logprobs=lp,
                                        finish_reason=c.finish_reason, stop_reason=c.stop_reason))
    resp = CompletionResponse(id=gen.base_id, model=aeng.served_model_name, choices=choices, usage=gen.usage())
    return JSONResponse(resp.model_dump())


def _echo_texts(prompts: list[Any], aeng: AsyncEngine) -> list[str]:
    return [p if isinstance(p, str) else aeng.tokenizer.decode(p, skip_special_tokens=False) for p in prompts]


def _chunk(gen: Generation, created: int, model: str, c: ChoiceState, text: str,
           logprobs: CompletionLogprobs | None) -> dict[str, Any]:
    return {"id": gen.base_id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": c.index, "text": text,
                         "logprobs": logprobs.model_dump() if logprobs is not None else None,
                         "finish_reason": c.finish_reason, "stop_reason": c.stop_reason}]}


async def _stream(gen: Generation, req: CompletionRequest, echo: list[str] | None,
                  include_usage: bool, aeng: AsyncEngine) -> AsyncIterator[str]:
    created = int(time.time())
    model = aeng.served_model_name
    text = TokenText(aeng.tokenizer)
    offsets = {c.index: 0 for c in gen.choices.values()}
    try:
        if echo:
            for c in sorted(gen.choices.values(), key=lambda c: c.index):
                offsets[c.index] = len(echo[c.prompt_index])
                yield sse(_chunk(gen, created, model, c, echo[c.prompt_index], None))
        while (events := await gen.next_events(None)) is not None:
            for ev in events:
                c = gen.choices[ev.request_id]
                delta, new_ids, new_lp = c.apply(ev)
                lp = None
                if req.logprobs is not None:
                    lp = CompletionLogprobs()
                    offsets[c.index] = completion_logprobs(lp, new_ids, new_lp, req.logprobs, text,
                                                           offsets[c.index])
                # One chunk per step that produced tokens, even when their text is held back (stop
                # string prefix, incomplete UTF-8): like vLLM, so clients can time every token.
                if delta or new_ids or c.finish_reason is not None:
                    yield sse(_chunk(gen, created, model, c, delta, lp))
        if include_usage:
            yield sse({"id": gen.base_id, "object": "text_completion", "created": created, "model": model,
                       "choices": [], "usage": gen.usage().model_dump()})
    except Exception as exc:  # the status line is already sent: report in-band, then end the stream
        yield stream_error(exc)
    finally:
        gen.abort()  # no-op when everything finished; frees KV pages when the client went away
    yield SSE_DONE
