"""Steps of many tokens padded to a few bucketed shapes, so the megakernel reuses compiled streams.

A compiled stream (its instruction tensor, step-args layout and buffers) is specialised to a step's token and
sequence counts, and compiling one for a large step takes a Python build of tens of thousands of instructions
(~0.3-0.5 s). A server mixing prompt chunks and decodes meets a new (tokens, sequences) pair at almost every step,
so steps larger than one token group are padded up to bucketed counts (about 1.5x apart) with dummy sequences:
each dummy token sits at position 0 of a one-page table that names a spare KV page no request owns, attends to that
one key and writes its K/V there. Rows are independent in every op but attention, which stays within a sequence,
so the real sequences' results are those of the unpadded step; the caller drops the dummy rows.
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


def pad_batch(batch: StepBatch, spare_page: int, whole_table: bool = False,
              max_tokens: int | None = None) -> StepBatch:
    """`batch` with dummy sequences appended so its counts are padded_counts'; `batch` itself when they already
    are, or when the padded step would carry more than `max_tokens` tokens. Dummy sequences take one token each,
    the last one the rest; every dummy token is token 0 at position 0, context 1, block table [spare_page] (one
    column: the table stays as wide as the real sequences').
    `whole_table`: every column of a dummy's table names the spare page, for a run of decode steps that advances
    the dummies' positions along with the real ones."""
    T, S = padded_counts(batch.num_tokens, batch.num_seqs)
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
