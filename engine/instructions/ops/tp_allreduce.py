"""TP_ALLREDUCE: one column chunk of the residual averaged over the ranks of a tensor-parallel group, inside the step.

Each rank runs its shard of the model (models/llama/tensor_parallel.py megakernel_shard) and keeps hidden / N, N the
ranks: its O or down projection adds its partial sum into that, so the ranks' average is the whole model's next
residual over N again, and its RMSNorms (eps / N^2) read it as the whole model's. Two phases, as the GPU runs them
(csrc/interpreter/ops/tp_allreduce.cuh), through engine/instructions/tp_exchange.py's memory:

- publish, once the instruction's counter waits are met: the chunk of hidden into this rank's send slot (index & 1),
  then this rank's publish count for (index, chunk) to every rank;
- reduce, once every rank has published (index, chunk) as often: hidden (and mid, for the MLP that reads it) =
  (send_0 + send_1 + ... + send_{N-1}) / N, summed from rank 0 up on every rank, so every rank holds the same bits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from engine.instructions.accesses import Access, box
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, CrossRank, OpSpec
from engine.instructions.tp_exchange import flag_index


@dataclass(frozen=True)
class TpAllreduce:
    """hidden[:, c] (and mid[:, c] if write_mid) = the ranks' hidden[:, c] averaged, c in [col_begin, col_end);
    `index` = 2 layer (after the O projection) or 2 layer + 1 (after down); `chunk` numbers the column range."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("index", "chunk", "col_begin", "col_end", "write_mid")
    index: int
    chunk: int
    col_begin: int
    col_end: int
    write_mid: int
    header: Header = field(default_factory=Header)


def _count(i: TpAllreduce, b: Buffers, src: int) -> int:
    ex = b.tp
    assert ex is not None
    return int(ex.flags[flag_index(i.index, i.chunk, src, ex.world)])


def publish(i: TpAllreduce, b: Buffers) -> None:
    ex = b.tp
    if ex is None:
        return
    T, cols = b.args.num_tokens, slice(i.col_begin, i.col_end)
    if T > ex.send.shape[1]:
        raise ValueError(f"TP_ALLREDUCE: a step of {T} tokens, the send slots hold {ex.send.shape[1]}")
    ex.send[i.index & 1, :T, cols] = b.get("hidden")[:T, cols]
    count = _count(i, b, ex.rank) + 1
    for peer in ex.peers:
        peer.flags[flag_index(i.index, i.chunk, ex.rank, ex.world)] = count


def ready(i: TpAllreduce, b: Buffers) -> bool:
    ex = b.tp
    if ex is None:
        return True
    own = _count(i, b, ex.rank)
    return all(_count(i, b, q) >= own for q in range(ex.world))


def execute(i: TpAllreduce, b: Buffers) -> None:
    ex = b.tp
    if ex is None:  # one rank: its residual is the average
        return
    T, cols, slot = b.args.num_tokens, slice(i.col_begin, i.col_end), i.index & 1
    total = ex.peers[0].send[slot, :T, cols].clone()
    for peer in ex.peers[1:]:
        total = total + peer.send[slot, :T, cols]
    total = total * (torch.tensor(1.0, dtype=torch.float32) / ex.world)
    b.get("hidden")[:T, cols] = total
    if i.write_mid:
        b.get("mid")[:T, cols] = total


def accesses(i: TpAllreduce, b: Buffers) -> list[Access]:
    """Its own rank's regions; what it reads of the other ranks is ordered by their publish counts, not counters."""
    region = (box((0, b.args.num_tokens), (i.col_begin, i.col_end)),)
    out = [Access("hidden", "r", region), Access("hidden", "w", region)]
    if i.write_mid:
        out.append(Access("mid", "w", region))
    return out


def cost(i: TpAllreduce, c: CostInputs) -> InstrCost:
    T, n, world = c.shape.num_tokens, i.col_end - i.col_begin, c.dims.tp_world
    # the chunk read and sent, every rank's copy read back (over NVLink), hidden (and mid) written
    return InstrCost(0, T * n * 4 * (world + 3 + i.write_mid), world * T * n)


SPEC = OpSpec("TP_ALLREDUCE", TpAllreduce, execute, accesses, cost, cross_rank=CrossRank(publish, ready))
