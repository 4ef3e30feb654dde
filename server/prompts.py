"""Request prompts → token ids, checked against the vocabulary and the context, before anything
reaches the engine thread.

Strings are tokenised (and chat messages rendered) in the tokenizer pool; the engine then receives
`{"prompt": text, "prompt_token_ids": ids}` and never tokenises on its own thread. Every check that
can fail for one request happens here, so the engine only sees requests it can serve.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.errors import bad_request
from server.tokenizer_pool import TokenizerPool


@dataclass(frozen=True)
class PreparedPrompt:
    text: str | None  # None for a prompt given as token ids
    token_ids: list[int]

    def engine_input(self) -> dict[str, Any]:
        return {"prompt": self.text, "prompt_token_ids": self.token_ids}


@dataclass(frozen=True)
class ModelLimits:
    """What every prompt is checked against (read once from the loaded engine)."""

    vocab_size: int
    max_model_len: int


def _too_long(what: str, n_tokens: int, limits: ModelLimits, param: str, at_least: bool = False) -> Exception:
    count = f"at least {n_tokens}" if at_least else str(n_tokens)
    return bad_request(f"{what} has {count} tokens, but the model's context is {limits.max_model_len} tokens "
                       f"(max_model_len) and at least one token must be generated", param)


def check_token_ids(ids: list[int], limits: ModelLimits, param: str) -> list[int]:
    vocab = limits.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise bad_request(f"{param}: token ids must be in [0, {vocab}); got {bad[:5]}", param)
    return ids


def _check_fits(what: str, n_tokens: int, limits: ModelLimits, param: str) -> None:
    if n_tokens + 1 > limits.max_model_len:
        raise _too_long(what, n_tokens, limits, param)


async def completion_prompts(prompts: list[str | list[int]], pool: TokenizerPool,
                             limits: ModelLimits) -> list[PreparedPrompt]:
    out = []
    for i, p in enumerate(prompts):
        what = "the prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if isinstance(p, str):
            lower = pool.min_tokens(p)
            if lower + 1 > limits.max_model_len:
                raise _too_long(what, lower, limits, "prompt", at_least=True)
            ids = await pool.encode(p)
            if not ids:
                raise bad_request(f"{what} tokenises to no tokens", "prompt")
            _check_fits(what, len(ids), limits, "prompt")
            out.append(PreparedPrompt(p, ids))
        else:
            _check_fits(what, len(p), limits, "prompt")
            out.append(PreparedPrompt(None, check_token_ids(list(p), limits, "prompt")))
    return out


async def chat_prompt(messages: list[dict[str, Any]], pool: TokenizerPool, limits: ModelLimits,
                      check_fit: bool = True) -> PreparedPrompt:
    """The conversation rendered by the chat template; `check_fit=False` for /tokenize, which counts
    tokens of conversations of any length."""
    lower = pool.min_tokens("".join(str(m.get("content") or "") for m in messages))
    if check_fit and lower + 1 > limits.max_model_len:
        raise _too_long("the conversation", lower, limits, "messages", at_least=True)
    try:
        ids = await pool.chat(messages)
    except (ValueError, TypeError) as exc:
        raise bad_request(f"messages: {exc}", "messages") from None
    except Exception as exc:  # jinja2 TemplateError: the template rejected the conversation
        if type(exc).__module__.startswith("jinja2"):
            raise bad_request(f"messages: the chat template rejected them: {exc}", "messages") from None
        raise
    if check_fit:
        _check_fits("the conversation", len(ids), limits, "messages")
    return PreparedPrompt(None, ids)


def max_tokens_for(prompts: list[PreparedPrompt], requested: int | None, default: int | None,
                   limits: ModelLimits, param: str = "max_tokens") -> list[int]:
    """max_tokens per prompt. An explicit value that does not fit the context is a 400 (as vLLM); the
    default is cut to what fits (the whole rest of the context when there is no default)."""
    out = []
    for p in prompts:
        room = limits.max_model_len - len(p.token_ids)
        if requested is not None:
            if requested > room:
                raise bad_request(
                    f"{param} is {requested}, but the prompt has {len(p.token_ids)} tokens and the model's "
                    f"context is {limits.max_model_len} tokens: at most {room} can be generated", param)
            out.append(requested)
        else:
            out.append(room if default is None else min(default, room))
    return out
