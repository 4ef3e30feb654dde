"""ChunkTemplates: a stream's SSE chunks spliced from a template are the bytes sse(chunk) writes."""
from __future__ import annotations

import json
import random

from server.serving_common import ChunkTemplates, sse

TEXTS = ["", " hello", "\"quoted\" \\ back", "line\nbreak\ttab", "ü€😀 中文", "\x00\x1f\x7f", "\ufffd", "a" * 500]


def completion_chunk(index: int, text: str) -> dict:
    return {"id": "cmpl-x", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None}]}


def chat_chunk(index: int, text: str) -> dict:
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": None,
                         "stop_reason": None}]}


def test_spliced_chunks_are_the_bytes_of_sse() -> None:
    rng = random.Random(0)
    for make in (completion_chunk, chat_chunk):
        templates = ChunkTemplates()
        texts = TEXTS + ["".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(12))) for _ in range(200)]
        for text in texts:
            index = rng.randrange(3)
            line = templates.render(index, text, lambda t, i=index: make(i, t))
            assert line == sse(make(index, text))
            assert json.loads(line.removeprefix("data: "))["choices"][0]["index"] == index


def test_a_chunk_without_the_text_falls_back_to_sse() -> None:
    templates = ChunkTemplates()
    chunk = {"id": "x", "choices": []}
    assert templates.render(0, "hi", lambda _t: chunk) == sse(chunk)
