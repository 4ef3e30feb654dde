"""A tensor-parallel rank's exchange memory on its GPU (engine/instructions/tp_exchange.py: two send slots of
the residual's rows and the publish counts; the push path's receive slots, csrc/interpreter/ops/tp_allreduce.cuh;
TP_ARGMAX's rows, csrc/interpreter/ops/tp_argmax.cuh),
allocated for CUDA IPC (csrc/interpreter/peer_memory.cu) and mapped by
every other rank of the group, and the megakernel's launch fields for it (csrc/interpreter/ops/tp_allreduce.cuh)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engine.cuda_build import load_extension
from engine.instructions.layout import ModelDims
from engine.instructions.tp_exchange import SEND_SLOTS, TP_FLAG_CHUNKS, flag_words

# Every rank's object, in rank order, from this rank's (an all-gather over the group: torch.distributed's
# all_gather_object).
Exchange = Callable[[Any], list[Any]]


class TpPeers:
    """This rank's send slots and flags, and every rank's as mapped here (device arrays of pointers, rank order)."""

    def __init__(self, rank: int, world: int, dims: ModelDims, slot_tokens: int, ll_tokens: int,
                 device: torch.device, exchange: Exchange) -> None:
        """Collective: every rank of the group constructs its TpPeers together (`exchange` all-gathers the IPC
        handles). `slot_tokens`: the most tokens a step of this rank's backend has; `ll_tokens`: the most a step
        taking the push path has (KernelOptions.tp_ll_tokens; 0: none)."""
        self.rank, self.world, self.slot_tokens, self.ll_tokens = rank, world, slot_tokens, ll_tokens
        self._module = load_extension("mk_peer_memory")
        # send slots, counts, receive slots, TP_ARGMAX's rows (csrc/interpreter/globals.cuh)
        sizes = [SEND_SLOTS * slot_tokens * dims.hidden * 4, flag_words(dims.layers, world) * 4,
                 SEND_SLOTS * world * max(1, ll_tokens) * dims.hidden * 8, world * slot_tokens * 2 * 8]
        self._own = [self._module.alloc_zeroed(n) for n in sizes]
        handles = exchange([self._module.export_handle(p) for p in self._own])
        self._opened: list[int] = []
        mapped: list[list[int]] = [[] for _ in sizes]  # per buffer kind, every rank's address here
        for q, rank_handles in enumerate(handles):
            for kind, handle in enumerate(rank_handles):
                if q == rank:
                    address = self._own[kind]
                else:
                    address = self._module.open_handle(handle)
                    self._opened.append(address)
                mapped[kind].append(address)
        self.send_ptrs, self.flag_ptrs, self.recv_ptrs, self.best_ptrs = (
            torch.tensor(m, dtype=torch.int64, device=device) for m in mapped)

    def fields(self) -> dict[str, int]:
        """The kernel's Globals for TP_ALLREDUCE and TP_ARGMAX (csrc/interpreter/globals.cuh)."""
        return {"tp_send": self.send_ptrs.data_ptr(), "tp_flags": self.flag_ptrs.data_ptr(),
                "tp_recv": self.recv_ptrs.data_ptr(), "tp_best": self.best_ptrs.data_ptr(),
                "tp_ll_tokens": self.ll_tokens, "tp_rank": self.rank,
                "tp_world": self.world, "tp_slot_tokens": self.slot_tokens, "tp_flag_chunks": TP_FLAG_CHUNKS}

    def close(self) -> None:
        """Unmap the peers' memory and free this rank's (after the last launch that uses it finished)."""
        torch.cuda.synchronize()
        for p in self._opened:
            self._module.close_handle(p)
        for p in self._own:
            self._module.free(p)
        self._opened, self._own = [], []
