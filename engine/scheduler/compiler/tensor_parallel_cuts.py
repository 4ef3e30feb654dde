"""A tensor-parallel rank's cuts of a step (ModelDims.tp_world > 1): the column chunks of each all-reduce of the
residual (one TP_ALLREDUCE each) and the LM head rows its greedy steps compute (TP_ARGMAX)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.instructions.layout import ModelDims
from engine.instructions.tp_exchange import TP_FLAG_CHUNKS
from engine.scheduler.compiler.partition import partition

if TYPE_CHECKING:
    from engine.scheduler.compiler.split_params import SplitParams


def tp_vocab_rows(d: ModelDims, rank: int, unit: int) -> tuple[int, int]:
    """The LM head rows a tensor-parallel rank's argmax-only steps compute (SplitParams.tp_vocab_rank): its share of
    the vocabulary in whole `unit`s, the ranks' shares ascending; the whole vocabulary for rank -1 or one rank."""
    if rank < 0 or d.tp_world == 1:
        return 0, d.vocab
    if rank >= d.tp_world:
        raise ValueError(f"SplitParams.tp_vocab_rank {rank} is not a rank of {d.tp_world}")
    return partition(0, d.vocab, d.tp_world, unit)[rank]


def tp_chunk_cut(d: ModelDims, p: SplitParams) -> tuple[tuple[int, int], ...]:
    """The column chunks of a tensor-parallel all-reduce (whole 16-byte vectors; none for one rank)."""
    if d.tp_world == 1:
        return ()
    if d.hidden % 4:
        raise ValueError(f"tensor parallelism: hidden_size {d.hidden} is not a multiple of 4 (the all-reduce moves "
                         "16-byte vectors)")
    chunks = max(1, min(TP_FLAG_CHUNKS, d.hidden // 4, round(d.hidden / p.tp_chunk_cols)))
    return tuple(partition(0, d.hidden, chunks, 4))
