"""Tokenisation and chat templates off the engine thread and off the event loop.

A long prompt takes seconds to tokenise (about 1.5 s per MB on one core). Done on the engine thread
it stalls every running stream; done on the event loop it stalls every connection. A few worker
threads do it instead (HF fast tokenizers release the GIL while encoding), each call borrowing one of
the pool's private tokenizer copies: a HF tokenizer object must not be used by two threads at once.
"""
from __future__ import annotations

import asyncio
import copy
import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from models.llama.tokenizer import apply_chat_template

T = TypeVar("T")

# A normaliser may shrink text before splitting it (e.g. NFKC folding), so a token can cover a
# little more text than its own spelling: the bound below allows for that with room to spare.
_NORMALIZER_SLACK = 4


class TokenizerPool:
    def __init__(self, tokenizer: Any, workers: int = 2):
        if workers < 1:
            raise ValueError(f"TokenizerPool: workers must be >= 1, got {workers}")
        self._copies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(workers):
            self._copies.put(copy.deepcopy(tokenizer))
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="megakernel-tokenizer")
        self.max_bytes_per_token = _max_bytes_per_token(tokenizer)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[[Any], T]) -> T:
        """fn(tokenizer) in a worker thread, with a tokenizer copy no other thread is using."""
        def job() -> T:
            tok = self._copies.get()
            try:
                return fn(tok)
            finally:
                self._copies.put(tok)

        return await asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return await self.run(lambda tok: list(tok.encode(text, add_special_tokens=add_special_tokens)))

    async def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        return await self.run(lambda tok: apply_chat_template(tok, messages))

    async def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return await self.run(lambda tok: tok.decode(ids, skip_special_tokens=skip_special_tokens))

    def min_tokens(self, text: str) -> int:
        """A lower bound on the token count of `text`, without tokenising it: rejects prompts far too
        long for the context before spending seconds on them."""
        return len(text.encode("utf-8", "surrogatepass")) // (self.max_bytes_per_token * _NORMALIZER_SLACK)


def _max_bytes_per_token(tokenizer: Any) -> int:
    """The most UTF-8 bytes any vocabulary entry is spelled with: byte-level BPE spells each byte as
    one (1-2 byte) character and SentencePiece spells a space as the 3-byte '▁', so a spelling is
    never shorter than the text its token covers."""
    longest = 1
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # a tokenizer without a vocabulary view: no bound (every prompt is tokenised)
        return 1 << 30
    for piece in vocab:
        longest = max(longest, len(piece.encode("utf-8", "surrogatepass")))
    return longest
