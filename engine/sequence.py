"""One request's token state as the scheduler sees it. Plain Python: no torch here.

A `Sequence` is the unit the scheduler admits, batches, preempts and finishes. Its tokens are
`prompt_token_ids + output_token_ids`; `num_computed_tokens` of them (a prefix) have their K/V in the
paged cache. The next step computes `all_token_ids[num_computed_tokens:]` (or a chunk of it).
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED_STOPPED = "finished_stopped"  # EOS or a stop string/token
    FINISHED_LENGTH = "finished_length"  # max_tokens or max_model_len reached
    FINISHED_ABORTED = "finished_aborted"  # client went away / explicit abort

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED

    @property
    def finish_reason(self) -> str | None:
        """OpenAI-style finish_reason: 'stop', 'length', 'abort', or None while unfinished."""
        return _FINISH_REASON.get(self)


_FINISHED = frozenset(
    {SequenceStatus.FINISHED_STOPPED, SequenceStatus.FINISHED_LENGTH, SequenceStatus.FINISHED_ABORTED}
)
_FINISH_REASON = {
    SequenceStatus.FINISHED_STOPPED: "stop",
    SequenceStatus.FINISHED_LENGTH: "length",
    SequenceStatus.FINISHED_ABORTED: "abort",
}


def _check_token(tok: object, what: str) -> int:
    # bool is an int subclass; a True/False token id is always a caller bug.
    if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
        raise ValueError(f"{what}: token ids must be non-negative ints, got {tok!r}")
    return tok


# eq=False: sequences compare (and hash) by identity, so they can live in sets/dicts and two requests
# with equal tokens are never confused.
@dataclass(eq=False)
class Sequence:
    seq_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    arrival_time: float = field(default_factory=time.monotonic)
    num_preemptions: int = 0
    # Most tokens one step computes for this sequence (None: the budget decides). 1 for a request whose prompt
    # tokens are scored: each step's logits then give the next prompt token's logprob.
    max_chunk: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seq_id, str) or not self.seq_id:
            raise ValueError(f"Sequence.seq_id must be a non-empty str, got {self.seq_id!r}")
        # Own copies: the caller's lists must not alias our state.
        self.prompt_token_ids = [
            _check_token(t, f"Sequence {self.seq_id!r} prompt_token_ids") for t in self.prompt_token_ids
        ]
        self.output_token_ids = [
            _check_token(t, f"Sequence {self.seq_id!r} output_token_ids") for t in self.output_token_ids
        ]
        if not 0 <= self.num_computed_tokens <= self.num_tokens:
            raise ValueError(
                f"Sequence {self.seq_id!r}: num_computed_tokens={self.num_computed_tokens} "
                f"outside [0, {self.num_tokens}]"
            )
        if self.max_chunk is not None and self.max_chunk < 1:
            raise ValueError(f"Sequence {self.seq_id!r}: max_chunk must be >= 1 or None, got {self.max_chunk}")
        if not isinstance(self.status, SequenceStatus):
            raise ValueError(f"Sequence {self.seq_id!r}: status must be a SequenceStatus, got {self.status!r}")

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_pending_tokens(self) -> int:
        """Tokens whose K/V are not in the cache yet (1 for a sequence ready to decode)."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def last_token_id(self) -> int:
        if self.output_token_ids:
            return self.output_token_ids[-1]
        if self.prompt_token_ids:
            return self.prompt_token_ids[-1]
        raise ValueError(f"Sequence {self.seq_id!r} has no tokens")

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    def token_slice(self, start: int, end: int) -> tuple[int, ...]:
        """`tuple(all_token_ids[start:end])` without concatenating the whole sequence (a decode step
        reads one token; copying a long prompt every step would make each step O(length))."""
        if not 0 <= start <= end <= self.num_tokens:
            raise ValueError(
                f"Sequence {self.seq_id!r}: token slice [{start}, {end}) outside [0, {self.num_tokens}]"
            )
        p = len(self.prompt_token_ids)
        if end <= p:
            return tuple(self.prompt_token_ids[start:end])
        if start >= p:
            return tuple(self.output_token_ids[start - p : end - p])
        return tuple(self.prompt_token_ids[start:]) + tuple(self.output_token_ids[: end - p])

    def append_token(self, tok: int) -> None:
        self.output_token_ids.append(_check_token(tok, f"Sequence {self.seq_id!r} append_token"))
