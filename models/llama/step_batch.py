"""One engine step's input: the new tokens of every scheduled sequence, flattened.

A sequence contributes 1 token (decode) or many (a prefill chunk, possibly starting mid-prompt).
`query_start` is the cu_seqlens prefix sum: sequence s owns rows query_start[s]:query_start[s+1]
of `token_ids` / `positions`. `context_lens[s]` is the cache length once this step's tokens are
written, and `block_tables[s]` lists the KV pages holding positions 0..context_lens[s]-1
(-1 padded to the longest table in the step).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepBatch:
    token_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    query_start: torch.Tensor  # int64 [S + 1]
    context_lens: torch.Tensor  # int64 [S]
    block_tables: torch.Tensor  # int32 [S, max_pages], -1 padded

    @property
    def num_seqs(self) -> int:
        return int(self.context_lens.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    def last_token_indices(self) -> torch.Tensor:
        """Row (into token_ids) of each sequence's last new token, int64 [S]."""
        return self.query_start[1:] - 1

    def next_decode(self, token_ids: torch.Tensor, page_size: int) -> StepBatch:
        """The decode step after this one, as an on-device decode loop advances it: sequence s's new token is
        `token_ids[s]`, one position further. Only for decode steps (one token per sequence) whose block tables
        already hold the next position."""
        if self.num_tokens != self.num_seqs:
            raise ValueError(f"StepBatch.next_decode: a decode step has one token per sequence, got "
                             f"{self.num_tokens} tokens for {self.num_seqs} sequences")
        ctx = self.context_lens + 1
        pages = (self.block_tables >= 0).sum(dim=1).to(ctx.device)
        short = (pages * page_size < ctx).nonzero()
        if len(short):
            s = int(short[0])
            raise ValueError(f"StepBatch.next_decode: sequence {s} needs a page for position {int(ctx[s]) - 1} "
                             f"but its block table has {int(pages[s])} pages of {page_size}")
        return StepBatch(token_ids=token_ids.to(self.token_ids), positions=self.positions + 1,
                         query_start=self.query_start, context_lens=ctx, block_tables=self.block_tables)

    @staticmethod
    def build(
        new_tokens: list[list[int]],
        start_positions: list[int],
        block_tables: list[list[int]],
        device: torch.device | str = "cpu",
        *,
        page_size: int,
    ) -> StepBatch:
        """Validate and pack one step. Sequence s writes new_tokens[s] at positions
        start_positions[s], start_positions[s] + 1, ...; its block table must cover them all."""
        n = len(new_tokens)
        if n == 0:
            raise ValueError("StepBatch.build: at least one sequence is required")
        if len(start_positions) != n or len(block_tables) != n:
            raise ValueError(
                f"StepBatch.build: new_tokens has {n} sequences but start_positions has "
                f"{len(start_positions)} and block_tables {len(block_tables)}"
            )
        if page_size <= 0:
            raise ValueError(f"StepBatch.build: page_size must be positive, got {page_size}")
        tokens: list[int] = []
        positions: list[int] = []
        query_start = [0]
        context_lens: list[int] = []
        for s, (toks, start, table) in enumerate(zip(new_tokens, start_positions, block_tables)):
            if len(toks) == 0:
                raise ValueError(f"StepBatch.build: sequence {s} has no new tokens")
            if any(t < 0 for t in toks):
                raise ValueError(f"StepBatch.build: sequence {s} has a negative token id")
            if start < 0:
                raise ValueError(f"StepBatch.build: sequence {s} start position {start} is negative")
            ctx = start + len(toks)
            needed = -(-ctx // page_size)
            if len(table) < needed:
                raise ValueError(
                    f"StepBatch.build: sequence {s} needs {needed} pages for context length {ctx} "
                    f"(page_size {page_size}) but its block table has {len(table)}"
                )
            if any(p < 0 for p in table):
                raise ValueError(f"StepBatch.build: sequence {s} block table has a negative page id")
            if len(set(table)) != len(table):
                raise ValueError(f"StepBatch.build: sequence {s} block table repeats a page")
            tokens.extend(toks)
            positions.extend(range(start, ctx))
            query_start.append(query_start[-1] + len(toks))
            context_lens.append(ctx)
        max_pages = max(len(t) for t in block_tables)
        padded = [list(t) + [-1] * (max_pages - len(t)) for t in block_tables]
        return StepBatch(
            token_ids=torch.tensor(tokens, dtype=torch.int64, device=device),
            positions=torch.tensor(positions, dtype=torch.int64, device=device),
            query_start=torch.tensor(query_start, dtype=torch.int64, device=device),
            context_lens=torch.tensor(context_lens, dtype=torch.int64, device=device),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=device).reshape(n, max_pages),
        )
