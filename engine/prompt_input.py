"""Turn the three prompt forms (text, token ids, {"prompt_token_ids": ...}) into checked token ids.

Runs before a request touches any engine state; every rejection is a `RequestError` naming the field.
"""
from __future__ import annotations

from typing import Any

from engine.errors import RequestError

PromptInput = str | list[int] | dict[str, Any]


def prompt_token_ids(prompt: PromptInput, tokenizer: Any, vocab_size: int) -> tuple[str | None, list[int]]:
    """(prompt text or None, token ids in [0, vocab_size)); the ids may be empty (the caller decides)."""
    if isinstance(prompt, str):
        try:
            return prompt, list(tokenizer.encode(prompt, add_special_tokens=True))
        except Exception as exc:  # noqa: BLE001 - whatever the tokenizer rejects is the caller's input
            raise RequestError(f"prompt could not be tokenized: {type(exc).__name__}: {exc}") from exc
    if isinstance(prompt, dict):
        if "prompt_token_ids" not in prompt:
            raise RequestError("prompt: a dict prompt needs the key 'prompt_token_ids'")
        text = prompt.get("prompt")
        if text is not None and not isinstance(text, str):
            raise RequestError(f"prompt: the dict's 'prompt' must be a string, got {type(text).__name__}")
        return text, checked_token_ids(prompt["prompt_token_ids"], vocab_size)
    if isinstance(prompt, (list, tuple)):
        return None, checked_token_ids(prompt, vocab_size)
    raise RequestError(f"prompt must be a string, a list of token ids or a dict, got {type(prompt).__name__}")


def checked_token_ids(ids: Any, vocab_size: int) -> list[int]:
    if not isinstance(ids, (list, tuple)):
        raise RequestError(f"prompt_token_ids must be a list of ints, got {type(ids).__name__}")
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise RequestError(f"prompt_token_ids must be ints in [0, {vocab_size}), got {t!r}")
    return [int(t) for t in ids]
