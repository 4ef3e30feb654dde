"""POST /v1/chat/completions: the model's chat template, streaming (SSE) or not."""
from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.async_engine import AsyncEngine
from server.logprobs import TokenText, chat_logprobs
from server.params import chat_logprobs as requested_logprobs
from server.params import chat_messages, check_fanout, check_model, per_prompt, sampling_params
from server.prompts import chat_prompt, max_tokens_for
from server.protocol import (ChatChoice, ChatCompletionRequest, ChatCompletionResponse, ChatLogprobs,
                             ChatResponseMessage)
from server.serving_common import (SSE_DONE, SSE_HEADERS, ChunkTemplates, Generation, StreamGate, sse,
                                   stream_error, write_together)


async def create_chat_completion(req: ChatCompletionRequest, http: Request, aeng: AsyncEngine) -> Any:
    check_model(req.model, aeng.served_model_name)
    messages = chat_messages(req)
    check_fanout(req.n, 1, aeng.max_pending)
    k = requested_logprobs(req)
    assert aeng.limits is not None and aeng.tokenizers is not None  # the app only routes here when ready
    choice_params = sampling_params(req, k, aeng.limits.vocab_size)
    prompt = await chat_prompt(messages, aeng.tokenizers, aeng.limits)
    # OpenAI chat has no small default: generate until EOS or the context is full.
    by_completion = req.max_completion_tokens is not None
    max_tokens = max_tokens_for([prompt], req.max_completion_tokens if by_completion else req.max_tokens, None,
                                aeng.limits, "max_completion_tokens" if by_completion else "max_tokens")
    gen = Generation(aeng, f"chatcmpl-{uuid.uuid4().hex}", req.n, 1)
    await gen.submit([prompt], per_prompt(choice_params, max_tokens))
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        body = _stream(gen, k, include_usage, aeng)
        return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
    await gen.collect(http)
    text = TokenText(aeng.tokenizer)
    choices = []
    for c in sorted(gen.choices.values(), key=lambda c: c.index):
        lp = ChatLogprobs(content=chat_logprobs(c.token_ids, c.logprobs, k, text)) if k is not None else None
        choices.append(ChatChoice(index=c.index, message=ChatResponseMessage(content=c.text), logprobs=lp,
                                  finish_reason=c.finish_reason, stop_reason=c.stop_reason))
    resp = ChatCompletionResponse(id=gen.base_id, model=aeng.served_model_name, choices=choices,
                                  usage=gen.usage())
    return JSONResponse(resp.model_dump())


def _chunk(gen: Generation, created: int, model: str, index: int, delta: dict[str, Any],
           logprobs: Any, finish: str | None, stop_reason: Any = None) -> dict[str, Any]:
    return {"id": gen.base_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish,
                         "stop_reason": stop_reason}]}


async def _stream(gen: Generation, k: int | None, include_usage: bool,
                  aeng: AsyncEngine) -> AsyncIterator[str]:
    created = int(time.time())
    model = aeng.served_model_name
    text = TokenText(aeng.tokenizer)
    batch: list[str] = []  # the chunks of one read of the stream, written together (serving_common.write_together)
    templates = ChunkTemplates()
    gate = StreamGate(aeng.stream_interval)
    try:
        for c in sorted(gen.choices.values(), key=lambda c: c.index):
            yield sse(_chunk(gen, created, model, c.index, {"role": "assistant", "content": ""}, None, None))
        while (events := await gen.next_events(None)) is not None:
            for ev in events:
                c = gen.choices[ev.request_id]
                delta, new_ids, new_lp = c.apply(ev)
                gate.add(len(new_ids), c.finish_reason is not None)
                lp = None
                if k is not None and new_ids:
                    lp = {"content": [t.model_dump() for t in chat_logprobs(new_ids, new_lp, k, text)]}
                if delta or new_ids or c.finish_reason is not None:  # one chunk per token step, as vLLM
                    if lp is None and c.finish_reason is None:  # a running choice's token: its template
                        batch.append(templates.render(c.index, delta, lambda t, i=c.index: _chunk(
                            gen, created, model, i, {"content": t}, None, None)))
                    else:
                        body = {"content": delta} if delta or c.finish_reason is None else {}
                        batch.append(sse(_chunk(gen, created, model, c.index, body, lp, c.finish_reason,
                                                c.stop_reason)))
            if batch and gate.due():
                yield write_together(batch)
        if batch:
            yield write_together(batch)
        if include_usage:
            yield sse({"id": gen.base_id, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": gen.usage().model_dump()})
    except Exception as exc:  # the status line is already sent: report in-band, then end the stream
        if batch:
            yield write_together(batch)
        yield stream_error(exc)
    finally:
        gen.abort()
    yield SSE_DONE
