"""Incremental detokenization and stop-string handling for one request.

Decoding a window of recent ids (not the whole output) keeps this O(1) per token. Text is only
emitted once it no longer ends in U+FFFD, so multi-byte characters split across tokens come out
whole. Stop strings are searched near the end only, and while a request runs the last
(longest stop - 1) characters are held back so emitted text never has to be retracted.
"""
from __future__ import annotations

from typing import Any

# Enough prompt context for tokenizers that change spacing depending on the previous token.
_CONTEXT_TOKENS = 5
_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, prompt_ids: list[int], skip_special_tokens: bool = True):
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids: list[int] = list(prompt_ids[-_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)

    def add(self, token_id: int) -> str:
        """Feed one generated id; return the newly decodable text (possibly empty)."""
        self._ids.append(int(token_id))
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        if len(new_text) <= len(prefix_text) or new_text.endswith(_INCOMPLETE):
            return ""
        delta = new_text[len(prefix_text) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        """At the end of a request: whatever is still held back (an incomplete multi-byte character
        decodes to U+FFFD, as vLLM emits it), appended to the text."""
        pending = self._decode(self._ids[self._prefix_offset :])[
            len(self._decode(self._ids[self._prefix_offset : self._read_offset])) :]
        self._prefix_offset = self._read_offset = len(self._ids)
        self.text += pending
        return pending


def find_stop(text: str, delta_len: int, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """Earliest stop string that ends inside the last `delta_len` chars: (start index, stop)."""
    if not stops or delta_len == 0:
        return None
    longest = max(len(s) for s in stops)
    window_start = max(0, len(text) - delta_len - longest + 1)
    best: tuple[int, str] | None = None
    for stop in stops:
        pos = text.find(stop, window_start)
        if pos != -1 and (best is None or pos < best[0]):
            best = (pos, stop)
    return best


def visible_text(text: str, stops: tuple[str, ...], finished: bool) -> str:
    """Text safe to show: while running, hold back a tail that could still start a stop string."""
    if finished or not stops:
        return text
    hold = max(len(s) for s in stops) - 1
    return text[: len(text) - hold] if hold > 0 else text
