"""The step-args int32 buffer: the only data the host rewrites between steps of a cached stream.

Layout (word offsets are also stored in the header, so the interpreter needs no other parameters):
    header[16]: version, T, S, max_pages, page_size, off_token_ids, off_positions, off_slot_mapping,
                off_query_start, off_context_lens, off_block_tables, total_words, off_query_units, 0, 0, 0
    token_ids[T], positions[T], slot_mapping[T] (= page * page_size + row of each new token),
    query_start[S+1], context_lens[S], block_tables[S * max_pages] (row-major, -1 padded),
    query_units[S+1] (where each sequence's query units start: engine/instructions/query_units.py)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.instructions.format import FORMAT_VERSION
from engine.instructions.layout import (
    SA_MAX_PAGES, SA_NUM_SEQS, SA_NUM_TOKENS, SA_OFF_QUERY_UNITS, SA_PAGE_SIZE, SA_TOTAL_WORDS, SA_VERSION,
    StepShape, step_args_offsets,
)
from engine.instructions.query_units import unit_starts
from models.llama.step_batch import StepBatch

_SECTIONS = ("token_ids", "positions", "slot_mapping", "query_start", "context_lens", "block_tables")


class StepArgsError(ValueError):
    """A StepBatch does not fit the stream's StepShape, or a step-args buffer is malformed."""


def step_shape_of(batch: StepBatch) -> StepShape:
    return StepShape(batch.num_tokens, batch.num_seqs, int(batch.block_tables.shape[1]))


def encode_step_args(batch: StepBatch, shape: StepShape, page_size: int,
                     out: torch.Tensor | None = None, query_units: int | None = None) -> torch.Tensor:
    """Write `batch` into an int32 step-args buffer (a fresh one, or `out` patched in place); `query_units`: the
    stream's spread attention units per KV group and head range (None: one per sequence)."""
    if batch.num_tokens != shape.num_tokens or batch.num_seqs != shape.num_seqs:
        raise StepArgsError(f"StepBatch has T={batch.num_tokens}, S={batch.num_seqs}; stream expects {shape}")
    if batch.block_tables.shape[1] > shape.max_pages:
        raise StepArgsError(f"StepBatch.block_tables has {batch.block_tables.shape[1]} columns; stream "
                            f"expects at most max_pages={shape.max_pages}")
    off = step_args_offsets(shape)
    if out is None:
        out = torch.zeros(off["total"], dtype=torch.int32)
    elif out.dtype != torch.int32 or out.numel() != off["total"]:
        raise StepArgsError(f"step-args buffer: expected int32 [{off['total']}], got {out.dtype} {tuple(out.shape)}")
    header = [FORMAT_VERSION, shape.num_tokens, shape.num_seqs, shape.max_pages, page_size,
              *(off[s] for s in _SECTIONS), off["total"], off["query_units"]]
    assert len(header) == SA_OFF_QUERY_UNITS + 1
    out[: len(header)] = torch.tensor(header, dtype=torch.int32)
    tables = torch.full((shape.num_seqs, shape.max_pages), -1, dtype=torch.int32)
    tables[:, : batch.block_tables.shape[1]] = batch.block_tables.to(torch.int32)
    seq_of_token = torch.repeat_interleave(torch.arange(shape.num_seqs),
                                           (batch.query_start[1:] - batch.query_start[:-1]).cpu())
    pos = batch.positions.cpu().to(torch.int64)
    pages = tables[seq_of_token, pos // page_size].to(torch.int64)
    if bool((pages < 0).any()):
        t = int(torch.nonzero(pages < 0)[0, 0])
        raise StepArgsError(f"StepBatch: token {t} at position {int(pos[t])} has no page in its block table")
    units = (unit_starts(batch.query_start.tolist(), batch.context_lens.tolist(), query_units) if query_units
             else range(shape.num_seqs + 1))
    values = {"token_ids": batch.token_ids, "positions": pos, "slot_mapping": pages * page_size + pos % page_size,
              "query_start": batch.query_start, "context_lens": batch.context_lens, "block_tables": tables,
              "query_units": torch.tensor(list(units))}
    for s in (*_SECTIONS, "query_units"):
        v = values[s].reshape(-1).to(torch.int32)
        out[off[s]: off[s] + v.numel()] = v
    return out


@dataclass(frozen=True)
class StepArgsView:
    """Decoded step args (int64 tensors), exactly as an interpreter reads them from the buffer."""

    num_tokens: int
    num_seqs: int
    page_size: int
    token_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    query_start: list[int]
    context_lens: list[int]
    block_tables: torch.Tensor  # [S, max_pages]
    query_units: list[int]  # [S + 1]: where each sequence's query units start (query_units.py)

    def live_end(self, s: int) -> int:
        """The end of sequence s's live tokens: at most its context length. A padded step's last dummy sequence
        (engine/cuda/step_padding.py) carries the padding's tokens past its one-token context; attention, the tiles
        and the LM head skip them, so a padded step costs its real tokens (and a token per dummy)."""
        return self.query_start[s] + min(self.query_start[s + 1] - self.query_start[s], self.context_lens[s])

    def last_live_tokens(self, lo: int, hi: int) -> list[int]:
        """The last live token of each of sequences [lo, hi): the rows the LM head reads."""
        return [self.live_end(s) - 1 for s in range(lo, hi)]

    @staticmethod
    def decode(buf: torch.Tensor) -> StepArgsView:
        w = buf.to(torch.int64)
        if int(w[SA_VERSION]) != FORMAT_VERSION:
            raise StepArgsError(f"step-args header word {SA_VERSION}: version {int(w[SA_VERSION])} != {FORMAT_VERSION}")
        T, S, P = int(w[SA_NUM_TOKENS]), int(w[SA_NUM_SEQS]), int(w[SA_MAX_PAGES])
        if int(w[SA_TOTAL_WORDS]) != buf.numel():
            raise StepArgsError(f"step-args header: total_words {int(w[SA_TOTAL_WORDS])} != buffer size {buf.numel()}")
        off = step_args_offsets(StepShape(T, S, P))
        sec = lambda s, n: w[off[s]: off[s] + n]  # noqa: E731
        return StepArgsView(T, S, int(w[SA_PAGE_SIZE]), sec("token_ids", T), sec("positions", T),
                            sec("slot_mapping", T), sec("query_start", S + 1).tolist(),
                            sec("context_lens", S).tolist(), sec("block_tables", S * P).reshape(S, P),
                            sec("query_units", S + 1).tolist())
