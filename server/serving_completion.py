"""POST /v1/completions: legacy text completions, streaming (SSE) or not."""
from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.async_engine import AsyncEngine
from server.logprobs import TokenText, completion_logprobs
from server.params import (DEFAULT_MAX_TOKENS, check_fanout, check_model, completion_checks, per_prompt,
                           raw_prompts, sampling_params)
from server.prompts import PreparedPrompt, completion_prompts, max_tokens_for
from server.protocol import CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse
from server.serving_common import (SSE_DONE, SSE_HEADERS, ChoiceState, ChunkTemplates, Generation, StreamGate,
                                   sse, stream_error, write_together)


async def create_completion(req: CompletionRequest, http: Request, aeng: AsyncEngine) -> Any:
    check_model(req.model, aeng.served_model_name)
    completion_checks(req)
    raw = raw_prompts(req)
    check_fanout(req.n, len(raw), aeng.max_pending)
    assert aeng.limits is not None and aeng.tokenizers is not None  # the app only routes here when ready
    choice_params = sampling_params(req, req.logprobs, aeng.limits.vocab_size)
    if req.echo and req.logprobs is not None:  # the echoed prompt's tokens get logprobs too (evaluation harnesses)
        choice_params = [dataclasses.replace(p, prompt_logprobs=req.logprobs) for p in choice_params]
    prompts = await completion_prompts(raw, aeng.tokenizers, aeng.limits)
    max_tokens = max_tokens_for(prompts, req.max_tokens, DEFAULT_MAX_TOKENS, aeng.limits)
    gen = Generation(aeng, f"cmpl-{uuid.uuid4().hex}", req.n, len(prompts))
    echo = await _echo_texts(prompts, aeng) if req.echo else None
    await gen.submit(prompts, per_prompt(choice_params, max_tokens))
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
            offset = len(prefix)
            if echo and c.prompt_token_ids is not None and c.prompt_logprobs is not None:
                offset = completion_logprobs(lp, c.prompt_token_ids, c.prompt_logprobs, req.logprobs, text, 0)
            completion_logprobs(lp, c.token_ids, c.logprobs, req.logprobs, text, offset)
        choices.append(CompletionChoice(index=c.index, text=prefix + c.text, logprobs=lp,
                                        finish_reason=c.finish_reason, stop_reason=c.stop_reason))
    resp = CompletionResponse(id=gen.base_id, model=aeng.served_model_name, choices=choices, usage=gen.usage())
    return JSONResponse(resp.model_dump())


async def _echo_texts(prompts: list[PreparedPrompt], aeng: AsyncEngine) -> list[str]:
    assert aeng.tokenizers is not None
    return [p.text if p.text is not None else await aeng.tokenizers.decode(p.token_ids) for p in prompts]


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
    # With logprobs the echo waits for the choice's first event, which brings the prompt's logprobs.
    echo_later = bool(echo) and req.logprobs is not None
    batch: list[str] = []  # the chunks of one read of the stream, written together (serving_common.write_together)
    templates = ChunkTemplates()
    gate = StreamGate(aeng.stream_interval)
    try:
        if echo and not echo_later:
            for c in sorted(gen.choices.values(), key=lambda c: c.index):
                offsets[c.index] = len(echo[c.prompt_index])
                yield sse(_chunk(gen, created, model, c, echo[c.prompt_index], None))
        while (events := await gen.next_events(None)) is not None:
            for ev in events:
                c = gen.choices[ev.request_id]
                delta, new_ids, new_lp = c.apply(ev)
                gate.add(len(new_ids), c.finish_reason is not None)
                if echo and echo_later and ev.prompt_token_ids is not None:
                    echo_lp = CompletionLogprobs()
                    offsets[c.index] = completion_logprobs(
                        echo_lp, c.prompt_token_ids or [], c.prompt_logprobs or [], req.logprobs or 0, text, 0)
                    batch.append(sse(_chunk(gen, created, model, c, echo[c.prompt_index], echo_lp)))
                lp = None
                if req.logprobs is not None:
                    lp = CompletionLogprobs()
                    offsets[c.index] = completion_logprobs(lp, new_ids, new_lp, req.logprobs, text,
                                                           offsets[c.index])
                # One chunk per step that produced tokens, even when their text is held back (stop
                # string prefix, incomplete UTF-8): like vLLM, so clients can time every token.
                if delta or new_ids or c.finish_reason is not None:
                    if lp is None and c.finish_reason is None:  # a running choice's token: its template
                        batch.append(templates.render(c.index, delta,
                                                      lambda t, c=c: _chunk(gen, created, model, c, t, None)))
                    else:
                        batch.append(sse(_chunk(gen, created, model, c, delta, lp)))
            if batch and gate.due():
                yield write_together(batch)
        if batch:
            yield write_together(batch)
        if include_usage:
            yield sse({"id": gen.base_id, "object": "text_completion", "created": created, "model": model,
                       "choices": [], "usage": gen.usage().model_dump()})
    except Exception as exc:  # the status line is already sent: report in-band, then end the stream
        if batch:
            yield write_together(batch)
        yield stream_error(exc)
    finally:
        gen.abort()  # no-op when everything finished; frees KV pages when the client went away
    yield SSE_DONE
