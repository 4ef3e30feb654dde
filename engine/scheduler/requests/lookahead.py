"""Scheduling one step ahead of its tokens (the engine's look-ahead, engine/lookahead.py): a launched step's chunks
count as computed at once, and each sequence that goes on after it holds a placeholder token where its sampled one
will be, so the next `Scheduler.schedule()` gives it its decode before the host knows the token. Plain Python."""
from __future__ import annotations

from collections.abc import Collection

from engine.scheduler.requests.request_scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus

# Any valid id: the step that computes this position takes the real one from the device (a TokenFeed), and the
# host writes the real one over it once it is known (`resolve`), before anything else reads it.
PLACEHOLDER_TOKEN = 0


def advance_ahead(scheduler: Scheduler, output: SchedulerOutput, continuing: Collection[str]) -> dict[str, int]:
    """Record `output`'s chunks as computed before their sampled tokens are known (Scheduler.on_step_done without
    the tokens): a sampling chunk of a sequence in `continuing` gets a placeholder token; the others get their token
    later from `resolve` (a sequence that surely ends with it: no next decode is scheduled for it). Chunks of
    sequences no longer running are skipped. Returns seq_id -> the index of its placeholder in its tokens."""
    placeholders: dict[str, int] = {}
    for chunk in output.chunks:
        seq = chunk.seq
        if scheduler.get(seq.seq_id) is not seq or seq.status is not SequenceStatus.RUNNING:
            continue
        if seq.num_computed_tokens != chunk.start_pos:
            raise ValueError(f"advance_ahead: chunk of {seq.seq_id!r} starts at {chunk.start_pos} but "
                             f"{seq.num_computed_tokens} tokens are computed")
        seq.num_computed_tokens += len(chunk.token_ids)
        if chunk.samples and seq.seq_id in continuing:
            placeholders[seq.seq_id] = seq.num_tokens
            seq.append_token(PLACEHOLDER_TOKEN)
    return placeholders


def resolve(seq: Sequence, index: int | None, token: int) -> None:
    """`token`, the sampled one, at `index` of `seq`'s tokens (its placeholder), or appended where it got none.
    Whatever the sequence's status: a sequence preempted or retired since keeps its real tokens."""
    if index is None:
        seq.append_token(token)
        return
    at = index - seq.num_prompt_tokens
    if not 0 <= at < seq.num_output_tokens or seq.output_token_ids[at] != PLACEHOLDER_TOKEN:
        raise ValueError(f"resolve: {seq.seq_id!r} has no placeholder at token {index}")
    seq.output_token_ids[at] = token
