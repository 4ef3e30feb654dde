"""Translate validated OpenAI request bodies into engine inputs (prompts + SamplingParams).

Fields the engine cannot honour (logit_bias, tools, JSON response formats) are rejected with a 400
naming the field rather than silently ignored. Every SamplingParams is built here, on the event loop,
so a bad value is a 400 before the engine thread sees the request.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from engine.sampling_params import SEED_END, SEED_MIN, SamplingParams
from server.errors import bad_request, model_not_found
from server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest, _SamplingFields

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions

_FIELD_AT_START = re.compile(r"^([a-z_]+)\b")


def check_model(req_model: str | None, served: str) -> None:
    if req_model is not None and req_model != served:
        raise model_not_found(req_model, served)


def check_fanout(n: int, num_prompts: int, max_pending: int) -> None:
    """n choices x prompts engine requests must fit the in-flight limit even on an idle server:
    beyond it the request could never be served, which is the client's error, not a retry-later."""
    if n * num_prompts > max_pending:
        raise bad_request(f"n x prompts is {n} x {num_prompts} = {n * num_prompts} generations, more than this "
                          f"server ever runs at once ({max_pending}, --max-pending)", "n")


def engine_error_param(message: str) -> str | None:
    """The engine's request errors start with the offending field's name."""
    m = _FIELD_AT_START.match(message)
    return m.group(1) if m and m.group(1) in _REQUEST_FIELDS else None


_REQUEST_FIELDS = set(CompletionRequest.model_fields) | set(ChatCompletionRequest.model_fields)


def _stops(req: _SamplingFields) -> list[str]:
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(s == "" for s in stops):
        raise bad_request("stop strings must be non-empty", "stop")
    return stops


def _choice_seed(seed: int, i: int) -> int:
    # Choice i samples with seed + i, wrapped to stay in the range a generator accepts.
    s = seed + i
    return s - (SEED_END - SEED_MIN) if s >= SEED_END else s


def _base_kwargs(req: _SamplingFields, logprobs: int | None, vocab_size: int) -> dict[str, Any]:
    if req.logit_bias:
        raise bad_request("logit_bias is not supported by this server", "logit_bias")
    if req.stop_token_ids and any(not 0 <= t < vocab_size for t in req.stop_token_ids):
        raise bad_request(f"stop_token_ids must be in [0, {vocab_size})", "stop_token_ids")
    top_k = 0 if req.top_k is None or req.top_k >= vocab_size else req.top_k  # >= vocab: no filter
    return dict(
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=top_k, min_p=req.min_p,
        presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty, stop=_stops(req), stop_token_ids=list(req.stop_token_ids or []),
        include_stop_str_in_output=req.include_stop_str_in_output, ignore_eos=req.ignore_eos, logprobs=logprobs,
        skip_special_tokens=req.skip_special_tokens, min_tokens=req.min_tokens)


def sampling_params(req: _SamplingFields, logprobs: int | None, vocab_size: int) -> list[SamplingParams]:
    """One validated SamplingParams per choice (max_tokens still a placeholder: it depends on the
    prompt's length, see `per_prompt`, and as large as min_tokens until then). n > 1 fans out with seed + i so the
    choices differ but a seeded request stays reproducible."""
    kwargs = _base_kwargs(req, logprobs, vocab_size)
    placeholder = max(1, req.min_tokens)
    try:
        return [SamplingParams(**kwargs, max_tokens=placeholder,
                               seed=None if req.seed is None else _choice_seed(req.seed, i))
                for i in range(req.n)]
    except ValueError as exc:
        raise bad_request(str(exc), engine_error_param(str(exc))) from None


def per_prompt(choices: list[SamplingParams], max_tokens: list[int]) -> list[list[SamplingParams]]:
    """The choices' params for each prompt, with that prompt's max_tokens; a min_tokens above it is a 400 (as
    vLLM's: the default max_tokens counts too)."""
    for mt in max_tokens:
        for p in choices:
            if p.min_tokens > mt:
                raise bad_request(f"min_tokens must be <= max_tokens ({mt}), got {p.min_tokens}", "min_tokens")
    return [[dataclasses.replace(p, max_tokens=mt) for p in choices] for mt in max_tokens]


def raw_prompts(req: CompletionRequest) -> list[str | list[int]]:
    """Normalise the four OpenAI prompt forms to a list of prompts."""
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
