"""Translate validated OpenAI request bodies into engine inputs (prompts + SamplingParams).

Fields the engine cannot honour are rejected with a 400 naming the field, rather than silently
ignored, except where their value is the neutral default (clients send those routinely).
"""
from __future__ import annotations

from typing import Any

from engine.sampling_params import SamplingParams
from server.errors import bad_request
from server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest, _SamplingFields

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


def check_model(req_model: str | None, served: str) -> None:
    if req_model is not None and req_model != served:
        raise bad_request(f"the model {req_model!r} does not exist; this server serves {served!r}",
                          "model", "model_not_found")


def _check_unsupported(req: _SamplingFields) -> None:
    if req.presence_penalty != 0.0:
        raise bad_request("presence_penalty is not supported by this server (use 0)", "presence_penalty")
    if req.frequency_penalty != 0.0:
        raise bad_request("frequency_penalty is not supported by this server (use 0)", "frequency_penalty")
    if req.logit_bias:
        raise bad_request("logit_bias is not supported by this server", "logit_bias")


def _stops(req: _SamplingFields) -> list[str]:
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(s == "" for s in stops):
        raise bad_request("stop strings must be non-empty", "stop")
    return stops


def sampling_params(req: _SamplingFields, max_tokens: int | None, logprobs: int | None,
                    vocab_size: int) -> list[SamplingParams]:
    """One SamplingParams per choice: n > 1 fans out with seed + i so the choices differ but a
    seeded request stays reproducible."""
    _check_unsupported(req)
    if req.stop_token_ids and any(not 0 <= t < vocab_size for t in req.stop_token_ids):
        raise bad_request(f"stop_token_ids must be in [0, {vocab_size})", "stop_token_ids")
    temperature = 1.0 if req.temperature is None else req.temperature
    out = []
    for i in range(req.n):
        try:
            out.append(SamplingParams(
                temperature=temperature, top_p=1.0 if req.top_p is None else req.top_p,
                top_k=0 if req.top_k is None else req.top_k,
                max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
                stop=_stops(req), stop_token_ids=list(req.stop_token_ids or []),
                ignore_eos=req.ignore_eos, seed=None if req.seed is None else req.seed + i,
                logprobs=logprobs, skip_special_tokens=req.skip_special_tokens))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
    return out


def completion_prompts(req: CompletionRequest) -> list[str | list[int]]:
    """Normalise the four OpenAI prompt forms to a list of engine prompts."""
    p = req.prompt
    if isinstance(p, str):
        prompts: list[Any] = [p]
    elif not p:
        raise bad_request("prompt must not be empty", "prompt")
    elif all(isinstance(x, int) for x in p):
        prompts = [list(p)]
    else:
        prompts = list(p)
    for i, one in enumerate(prompts):
        if len(one) == 0:
            raise bad_request(f"prompt[{i}] is empty" if len(prompts) > 1 else "prompt must not be empty",
                              "prompt")
    return prompts


def completion_checks(req: CompletionRequest) -> None:
    if req.echo and req.logprobs is not None:
        raise bad_request("echo with logprobs (prompt logprobs) is not supported", "echo")
    if req.best_of is not None and req.best_of != req.n:
        raise bad_request("best_of other than n is not supported", "best_of")


def chat_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    if not req.messages:
        raise bad_request("messages must contain at least one message", "messages")
    if req.tools:
        raise bad_request("tools are not supported by this server", "tools")
    if req.response_format is not None and req.response_format.type != "text":
        raise bad_request(f"response_format {req.response_format.type!r} is not supported", "response_format")
    return [_message_dict(m, i) for i, m in enumerate(req.messages)]


def _message_dict(m: ChatMessage, i: int) -> dict[str, Any]:
    content = m.content
    if isinstance(content, list):
        content = "".join(part.text for part in content)
    if content is None:
        if m.role != "assistant":
            raise bad_request(f"messages[{i}].content is required for role {m.role!r}", f"messages.{i}.content")
        content = ""
    return {"role": m.role, "content": content}


def chat_logprobs(req: ChatCompletionRequest) -> int | None:
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs=true", "top_logprobs")
    return (req.top_logprobs or 0) if req.logprobs else None
