"""Steps of many tokens padded to a few bucketed shapes, so the megakernel reuses compiled streams.

A compiled stream (its instruction tensor, step-args layout and buffers) is specialised to a step's token and
sequence counts, and compiling one for a large step takes a Python build of tens of thousands of instructions
(~0.3-0.5 s). A server mixing prompt chunks and decodes meets a new (tokens, sequences) pair at almost every step,
so steps larger than one token group are padded up to bucketed counts (about 1.5x apart) with dummy sequences:
each dummy token sits at position 0 of a one-page table that names a spare KV page no request owns, attends to that
one key and writes its K/V there. Rows are independent in every op but attention, which stays within a sequence,
so the real sequences' results are those of the unpadded step; the caller drops the dummy rows. The last dummy's
tokens past its first are dead (more tokens than its one-token context: StepArgsView.live_end): attention, the
TILE_MATMUL tiles wholly past them and the LM head skip them, so a padded tile step costs about its real tokens.
"""
from __future__ import annotations

import torch

from models.llama.step_batch import StepBatch


def bucket_up(n: int) -> int:
    """The smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 1.5 * 2^k) that is >= n."""
    b = 1
    while True:
        for c in (b, 3 * b // 2):
            if c >= n:
                return c
        b *= 2


def padded_counts(num_tokens: int, num_seqs: int) -> tuple[int, int]:
    """(tokens, sequences) of the padded step: each a bucket, at least one dummy sequence wherever tokens are
    added, and at least one token per dummy sequence."""
    T, S = bucket_up(num_tokens), bucket_up(num_seqs)
    if T > num_tokens and S == num_seqs:
        S = bucket_up(num_seqs + 1)
    while T - num_tokens < S - num_seqs:
        T = bucket_up(T + 1)
    return T, S


def padded_budget(max_tokens: int, max_seqs: int) -> int:
    """The largest token budget of at most `max_tokens` whose steps (any count of up to `max_seqs` sequences) all pad
    to at most bucket_up(max_tokens) tokens. Each dummy sequence takes a token, so a step that fills a bucketed budget
    exactly and has a sequence count off the buckets would otherwise pad to the next token bucket: a full prefill
    step of 2 048 tokens over 18 sequences runs as 3 072 tokens over 24, half its work again. Leaving the dummies'
    tokens out of the budget (32 of 2 048 for 64 sequences) keeps every step in its budget's bucket."""
    top = bucket_up(max_tokens)
    budget = max_tokens
    while budget > 1 and any(padded_counts(budget, s)[0] > top for s in range(1, min(max_seqs, budget) + 1)):
        budget -= 1
    return budget


def can_pad(tokens: int, seqs: int, to_tokens: int, to_seqs: int) -> bool:
    """Whether a step of `tokens` tokens over `seqs` sequences pads to `to_tokens` over `to_seqs` (pad_batch's
    `counts`): no fewer of either, each dummy sequence one token or more, and added tokens only with a dummy to carry
    them."""
    extra_tokens, extra_seqs = to_tokens - tokens, to_seqs - seqs
    return extra_seqs >= 0 and extra_tokens >= extra_seqs and (extra_seqs > 0 or extra_tokens == 0)


def pad_batch(batch: StepBatch, spare_page: int, whole_table: bool = False,
              max_tokens: int | None = None, counts: tuple[int, int] | None = None) -> StepBatch:
    """`batch` with dummy sequences appended so its counts are padded_counts' (`counts`: these (tokens, sequences)
    instead, which can_pad must allow); `batch` itself when they already are, or when the padded step would carry
    more than `max_tokens` tokens. Dummy sequences take one token each,
    the last one the rest; every dummy token is token 0 at position 0, context 1, block table [spare_page] (one
    column: the table stays as wide as the real sequences').
    `whole_table`: every column of a dummy's table names the spare page, for a run of decode steps that advances
    the dummies' positions along with the real ones."""
    T, S = counts if counts is not None else padded_counts(batch.num_tokens, batch.num_seqs)
    if not can_pad(batch.num_tokens, batch.num_seqs, T, S):
        raise ValueError(f"a step of {batch.num_tokens} tokens over {batch.num_seqs} sequences does not pad to "
                         f"{T} over {S}")
    extra_seqs, extra_tokens = S - batch.num_seqs, T - batch.num_tokens
    if extra_seqs == 0 or (max_tokens is not None and T > max_tokens):
        return batch
    per_dummy = [1] * extra_seqs
    per_dummy[-1] += extra_tokens - extra_seqs
    dev = batch.token_ids.device
    starts = batch.query_start[-1] + torch.cumsum(torch.tensor(per_dummy, dtype=torch.int64), 0).to(dev)
    table = torch.full((extra_seqs, batch.block_tables.shape[1]), -1, dtype=batch.block_tables.dtype,
                       device=batch.block_tables.device)
    table[:, :table.shape[1] if whole_table else 1] = spare_page
    return StepBatch(
        token_ids=torch.cat([batch.token_ids, torch.zeros(extra_tokens, dtype=batch.token_ids.dtype, device=dev)]),
        positions=torch.cat([batch.positions, torch.zeros(extra_tokens, dtype=batch.positions.dtype, device=dev)]),
        query_start=torch.cat([batch.query_start, starts.to(batch.query_start)]),
        context_lens=torch.cat([batch.context_lens, torch.ones(extra_seqs, dtype=batch.context_lens.dtype,
                                                               device=batch.context_lens.device)]),
        block_tables=torch.cat([batch.block_tables, table]))


def largest_counts(max_tokens: int, max_seqs: int, kernel_max_tokens: int | None = None) -> tuple[int, int]:
    """(tokens, sequences) of a stream that runs every step the engine schedules padded (`max_tokens` tokens or
    fewer over `max_seqs` sequences or fewer): a bucket of sequences past max_seqs (a dummy one at least), and tokens
    for each dummy beyond the budget, within what the kernel's step holds."""
    seqs = bucket_up(max_seqs + 1)
    tokens = bucket_up(max_tokens + seqs)
    return (tokens if kernel_max_tokens is None else min(tokens, kernel_max_tokens)), seqs


def host_ladder(max_tokens: int, max_seqs: int, kernel_max_tokens: int | None = None) -> list[tuple[int, int]]:
    """(tokens, sequences) of streams that run every step the engine schedules padded, each with at most 1.5x its
    bucketed tokens: largest_counts' sequences at each token bucket from that many up to largest_counts' tokens."""
    top, seqs = largest_counts(max_tokens, max_seqs, kernel_max_tokens)
    ladder, t = [], bucket_up(seqs)
    while t < top:
        ladder.append((t, seqs))
        t = bucket_up(t + 1)
    return ladder + [(top, seqs)] if top >= seqs else ladder


def dummy_step(tokens: int, seqs: int, table_width: int, spare_page: int) -> StepBatch:
    """A step of `seqs` dummy sequences (pad_batch's: one token each, the last one the rest, every token at position
    0 of the spare page) with `table_width`-wide block tables: runs a stream of that shape and touches no request's
    KV."""
    if not 1 <= seqs <= tokens:
        raise ValueError(f"a dummy step needs 1 <= sequences <= tokens, got {seqs} over {tokens}")
    per_seq = [1] * seqs
    per_seq[-1] += tokens - seqs
    tables = torch.full((seqs, max(1, table_width)), -1, dtype=torch.int32)
    tables[:, 0] = spare_page
    return StepBatch(token_ids=torch.zeros(tokens, dtype=torch.int64), positions=torch.zeros(tokens, dtype=torch.int64),
                     query_start=torch.cat([torch.zeros(1, dtype=torch.int64),
                                            torch.cumsum(torch.tensor(per_seq, dtype=torch.int64), 0)]),
                     context_lens=torch.ones(seqs, dtype=torch.int64), block_tables=tables)
