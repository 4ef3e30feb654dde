"""Render the engine's per-token logprob dicts ({token_id: logprob}, chosen + top-k) in the two
OpenAI shapes: legacy completions (parallel lists) and chat (`content` list of token objects)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.protocol import CompletionLogprobs, TokenLogprob, TopLogprob


class TokenText:
    """id -> the token's own text, cached (one decode per distinct id per request)."""

    def __init__(self, tokenizer: Any):
        self._tok = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        s = self._cache.get(token_id)
        if s is None:
            s = self._tok.decode([token_id], skip_special_tokens=False)
            self._cache[token_id] = s
        return s


def _top(lp: dict[int, float], k: int) -> list[tuple[int, float]]:
    return sorted(lp.items(), key=lambda kv: -kv[1])[:k]


def completion_logprobs(out: CompletionLogprobs, token_ids: list[int], lps: Sequence[dict[int, float] | None],
                        k: int, text: TokenText, offset: int) -> int:
    """Append one entry per token to `out`; returns the text offset after the last token. A token without
    logprobs (an echoed prompt's first) gets null entries, as OpenAI and vLLM give it."""
    for tid, lp in zip(token_ids, lps):
        s = text(tid)
        out.tokens.append(s)
        out.token_logprobs.append(None if lp is None else lp.get(tid))
        out.top_logprobs.append(None if lp is None else {text(t): v for t, v in _top(lp, k)})
        out.text_offset.append(offset)
        offset += len(s)
    return offset


def chat_logprobs(token_ids: list[int], lps: list[dict[int, float]], k: int,
                  text: TokenText) -> list[TokenLogprob]:
    items = []
    for tid, lp in zip(token_ids, lps):
        s = text(tid)
        tops = [TopLogprob(token=text(t), logprob=v, bytes=list(text(t).encode("utf-8")))
                for t, v in _top(lp, k)]
        chosen = lp.get(tid, -9999.0)  # JSON has no -inf; vLLM uses the same sentinel
        items.append(TokenLogprob(token=s, logprob=chosen, bytes=list(s.encode("utf-8")), top_logprobs=tops))
    return items
