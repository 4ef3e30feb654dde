"""The `vm` backend over a tensor-parallel group (`EngineConfig.tensor_parallel_size` > 1), in one process: every
rank's VM runs the instruction streams that rank's GPU would run (its megakernel shard, models/llama/tensor_parallel.py
megakernel_shard), interleaved with the other ranks' (engine/vm/rank_group.py), their TP_ALLREDUCE instructions
exchanging through the same memory layout as the GPUs' (engine/instructions/tp_exchange.py). The CPU oracle of the
tensor-parallel megakernel: its logits are rank 0's (every rank computes the same)."""
from __future__ import annotations

import torch

from engine.backends.base import Backend
from engine.backends.vm_backend import VMBackend
from engine.instructions.tp_exchange import TpExchange
from engine.scheduler.compiler.step_builder_cache import StreamStats
from engine.vm.rank_group import RankGroupVM
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights


class TensorParallelVMBackend(Backend):
    name = "vm"

    def __init__(self, shards: list[LlamaWeights], num_pages: int, page_size: int, seed: int = 0,
                 **vm_options: object) -> None:
        """`shards`: every rank's megakernel shard, in rank order; `vm_options`: VMBackend's keywords (a static
        policy: a rank group runs static queues; no pad_over: each rank would run its hosting's warm-up steps alone)."""
        if vm_options.get("pad_over") is not None:
            raise ValueError("tensor_parallel_size > 1 on the vm backend runs every step in its own shape's stream "
                             "(pad_over unset)")
        world = len(shards)
        self.ranks = [VMBackend(w, num_pages=num_pages, page_size=page_size, seed=seed, tp_world=world, tp_rank=r,
                                **vm_options) for r, w in enumerate(shards)]  # type: ignore[arg-type]
        if self.ranks[0].params.policy == "dynamic":
            raise ValueError("tensor_parallel_size > 1 on the vm backend runs static queues: policy 'rr' or 'lpt'")
        dims = self.ranks[0].dims
        for rank, ex in zip(self.ranks, TpExchange.group(world, dims.layers, dims.hidden, slot_tokens=1)):
            rank.tp_exchange = ex
        self.seed = seed
        self.steps = 0

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        return self._step(batch, argmax_only=False)

    def _step(self, batch: StepBatch, argmax_only: bool) -> torch.Tensor:
        """One step on every rank; rank 0's logits (`argmax_only`: its share of the vocabulary's only)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as VMBackend.forward: each opcode is a handful of tiny tensor ops
        try:
            prepared = [rank.prepare(batch, argmax_only) for rank in self.ranks]
            for rank, (cs, _, _) in zip(self.ranks, prepared):
                assert rank.tp_exchange is not None
                rank.tp_exchange.ensure_tokens(cs.shape.num_tokens)
            group = RankGroupVM([rank.machine(bufs) for rank, (_, bufs, _) in zip(self.ranks, prepared)],
                                seed=self.seed + self.steps)
            traces = group.run_static([cs.tensor for cs, _, _ in prepared], [sync for _, _, sync in prepared])
            self.steps += 1
            logits = [rank.finish(batch, cs, bufs, trace)
                      for rank, (cs, bufs, _), trace in zip(self.ranks, prepared, traces)]
            return logits[0]
        finally:
            torch.set_num_threads(threads)

    @torch.inference_mode()
    def greedy(self, batch: StepBatch) -> torch.Tensor:
        """Rank 0's in-stream argmax ids (every rank computes the same), int64 [S]: each rank's LM head over its share
        of the vocabulary, the argmax across the ranks (TP_ARGMAX)."""
        self._step(batch, argmax_only=True)
        return self.ranks[0].last_tokens

    def stream_stats(self) -> StreamStats:
        return self.ranks[0].stream_stats()

