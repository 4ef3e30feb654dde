"""Scheduler config and per-step output records. Plain Python: no torch here."""
from __future__ import annotations

from dataclasses import dataclass

from engine.sequence import Sequence


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int  # seats: sequences RUNNING at once
    max_num_batched_tokens: int  # token budget of one step (decode tokens + prefill chunks)
    max_model_len: int  # longest sequence (prompt + output) the model serves
    num_pages: int  # KV-cache pages
    page_size: int  # tokens per page
    chunked_prefill: bool = True

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "num_pages", "page_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SchedulerConfig.{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.chunked_prefill, bool):
            raise ValueError(f"SchedulerConfig.chunked_prefill must be a bool, got {self.chunked_prefill!r}")
        # Without chunking a preempted sequence is recomputed in one chunk, prompt + output, so the budget
        # must hold the longest sequence or it could never be re-admitted.
        if not self.chunked_prefill and self.max_num_batched_tokens < self.max_seq_len:
            raise ValueError(
                f"SchedulerConfig: with chunked_prefill=False, max_num_batched_tokens "
                f"({self.max_num_batched_tokens}) must be >= the longest sequence, "
                f"min(max_model_len, num_pages*page_size) = {self.max_seq_len}"
            )

    @property
    def capacity_tokens(self) -> int:
        """Tokens the whole KV cache holds."""
        return self.num_pages * self.page_size

    @property
    def max_seq_len(self) -> int:
        """Longest sequence the scheduler can ever compute: max_model_len, or less if the cache is smaller.
        The engine should finish sequences (FINISHED_LENGTH) once they reach this many tokens."""
        return min(self.max_model_len, self.capacity_tokens)


@dataclass(frozen=True)
class ScheduledChunk:
    """New tokens of one sequence to compute this step: positions [start_pos, start_pos + len)."""

    seq: Sequence  # a live reference; do not mutate outside the scheduler
    token_ids: tuple[int, ...]  # == seq.all_token_ids[start_pos : start_pos + len(token_ids)]
    start_pos: int
    block_table: tuple[int, ...]  # holds every position < start_pos + len(token_ids)
    samples: bool  # the chunk reaches the last known token: the engine must sample the next one

    @property
    def seq_id(self) -> str:
        return self.seq.seq_id

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def context_len(self) -> int:
        """Cache length after this step (StepBatch.context_lens)."""
        return self.start_pos + len(self.token_ids)

    @property
    def positions(self) -> range:
        return range(self.start_pos, self.start_pos + len(self.token_ids))

    @property
    def is_decode(self) -> bool:
        return len(self.token_ids) == 1


@dataclass(frozen=True)
class SchedulerOutput:
    chunks: tuple[ScheduledChunk, ...]  # 1-token (decode) chunks first, then multi-token prefill chunks
    preempted: tuple[Sequence, ...]  # sent back to WAITING this step; their progress was dropped
    # Sequences the scheduler itself finished this step (FINISHED_LENGTH): only ones that reached
    # max_seq_len without the engine finishing them. The engine should emit their final output.
    finished: tuple[Sequence, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)

    @property
    def num_seqs(self) -> int:
        return len(self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks
