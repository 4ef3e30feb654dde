"""The memory TP_ALLREDUCE exchanges through (engine/instructions/ops/tp_allreduce.py): per rank, two send slots of
the residual's rows and an array of publish counts, every rank's mapped into every other's (the GPU: CUDA IPC over
NVLink, engine/cuda/tp_peers.py; the VM: the same tensors, engine/vm/rank_group.py).

Flags: `flags[(index * TP_FLAG_CHUNKS + chunk) * world + src]` on rank x holds how many times rank `src` has published
chunk `chunk` of all-reduce `index` (2 layer + 0 after O, + 1 after down) to x. Each rank publishes each (index,
chunk) once per step, so counts stay equal across ranks whatever streams the steps run in, and no reset is needed.
Two send slots (index & 1) suffice: a rank writes slot s of all-reduce k + 2 only after its own all-reduce k + 1,
which waited for every rank's k + 1, which each rank published after it had read every slot of k. (The GPU's push path for small steps adds receive
slots of tagged words, csrc/interpreter/ops/tp_allreduce.cuh: the same data, the same sum, so the VM models both.)
TP_ARGMAX (engine/instructions/ops/tp_argmax.py) exchanges each rank's best logit per sequence through `best_value` /
`best_id` (the GPU: tagged words, one row per rank) and counts at index 2 layers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

# Column chunks of one all-reduce the flags have room for (the step builder cuts at most this many).
TP_FLAG_CHUNKS = 64
# Most ranks of a group (the kernel's MAX_TP_RANKS).
MAX_TP_RANKS = 8
SEND_SLOTS = 2


def flag_words(layers: int, world: int) -> int:
    """Length of one rank's flag array: the all-reduces' (2 per layer) and TP_ARGMAX's (one more index)."""
    return (2 * layers + 1) * TP_FLAG_CHUNKS * world


def flag_index(index: int, chunk: int, src: int, world: int) -> int:
    return (index * TP_FLAG_CHUNKS + chunk) * world + src


def argmax_flag_index(layers: int, src: int, world: int) -> int:
    """TP_ARGMAX's publish count of rank `src`: index 2 layers, chunk 0."""
    return flag_index(2 * layers, 0, src, world)


@dataclass
class TpExchange:
    """One rank's view of its group's exchange memory (the VM's; the GPU's lives in engine/cuda/tp_peers.py)."""

    rank: int
    world: int
    send: torch.Tensor  # float32 [SEND_SLOTS, slot tokens, hidden]: this rank's
    flags: np.ndarray  # int64 [flag_words]: this rank's
    # TP_ARGMAX's: every rank's best logit and its vocab id per sequence, [world, slot tokens], written by that rank
    best_value: torch.Tensor = field(default_factory=lambda: torch.empty(0, 0))
    best_id: torch.Tensor = field(default_factory=lambda: torch.empty(0, 0, dtype=torch.int64))
    peers: list[TpExchange] = field(default_factory=list, repr=False)  # every rank's, in rank order (self included)

    @staticmethod
    def group(world: int, layers: int, hidden: int, slot_tokens: int) -> list[TpExchange]:
        """Every rank's exchange, each knowing all of them."""
        if not 1 <= world <= MAX_TP_RANKS:
            raise ValueError(f"tensor-parallel group of {world} ranks: 1..{MAX_TP_RANKS} supported")
        ranks = [TpExchange(r, world, torch.full((SEND_SLOTS, slot_tokens, hidden), float("nan")),
                            np.zeros(flag_words(layers, world), np.int64), *_best(world, slot_tokens))
                 for r in range(world)]
        for ex in ranks:
            ex.peers = ranks
        return ranks

    def ensure_tokens(self, tokens: int) -> None:
        """Send slots of at least `tokens` rows (the VM sizes them by the steps it meets)."""
        if self.send.shape[1] < tokens:
            self.send = torch.full((SEND_SLOTS, tokens, self.send.shape[2]), float("nan"))
            self.best_value, self.best_id = _best(self.world, tokens)


def _best(world: int, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TP_ARGMAX's exchange rows, poisoned (a row read before its rank wrote it shows)."""
    return torch.full((world, slots), float("nan")), torch.full((world, slots), -1, dtype=torch.int64)
