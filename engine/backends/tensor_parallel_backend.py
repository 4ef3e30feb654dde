"""The torch reference model over a tensor-parallel group of processes (`EngineConfig.tensor_parallel_size`) on CPUs:
this process is rank 0 and starts one worker process per other rank (engine/backends/rank_processes.py); every rank
reads only its shard of the weights from the checkpoint (models/llama/tensor_parallel.py load_shard: Megatron-style,
all-reduces after O and down, logits all-gathered) and holds its KV heads.

Each step rank 0 broadcasts the StepBatch, every rank runs it, and rank 0 hands the whole logits to the engine: the
engine, its scheduler and its sampler stay in this one process, so sampling happens once and no token has to be
sent back. The ranks run with gloo (the megakernel's ranks on GPUs: engine/backends/cuda_tensor_parallel.py). A
worker that exits makes the next step fail with an error naming it (checked before every step; a rank lost inside a
step ends the collective by the group's timeout), never a hang; `close()` ends the workers and the group.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from engine.backends.base import Backend
from engine.backends.rank_processes import RankProcesses
from engine.backends.tensor_parallel_worker import DEFAULT_TP_TIMEOUT_S, WorkerArgs, rank_cache
from engine.errors import EngineFatalError
from models.llama.config import LlamaConfig
from models.llama.step_batch import StepBatch
from models.llama.tensor_parallel import TensorParallelGroup, TensorParallelLlama, check_tensor_parallel, load_shard


class TensorParallelBackend(Backend):
    name = "torch"

    def __init__(self, checkpoint: str, config: LlamaConfig, load_options: dict[str, Any], num_pages: int,
                 page_size: int, device: torch.device, world: int, kv_dtype: torch.dtype | None = None,
                 timeout_s: float = DEFAULT_TP_TIMEOUT_S) -> None:
        """`load_options`: load_weights' keywords for every rank's shard of `checkpoint` (the workers load theirs
        meanwhile, without a progress bar)."""
        check_tensor_parallel(config, world)
        if dist.is_initialized():
            raise RuntimeError("tensor_parallel_size > 1: this process already belongs to a torch.distributed group "
                               "(one tensor-parallel engine per process)")
        if torch.device(device).type != "cpu":
            raise ValueError(f"tensor_parallel_size {world} runs the torch backend on CPUs (device {device!r}; the "
                             "megakernel's ranks run on GPUs: backend 'cuda')")
        self.world = world
        self._device = torch.device("cpu")
        self.ranks = RankProcesses(world, lambda rank, init: WorkerArgs(
            rank, world, init, checkpoint, config, load_options, num_pages, page_size, kv_dtype, timeout_s))
        self._closed = False
        try:
            shard = load_shard(checkpoint, config, 0, world, **load_options)
            self.ranks.join(timeout_s)
        except BaseException:
            self.ranks.stop()
            raise
        self.model = TensorParallelLlama(shard, TensorParallelGroup.current())
        self.kv = rank_cache(shard, num_pages, page_size, kv_dtype)

    @property
    def device(self) -> torch.device:
        return self._device

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        if self._closed:
            raise EngineFatalError("the tensor-parallel backend is closed")
        with self.ranks.collective():
            self.ranks.command(batch)
            return self.model(batch, self.kv)

    def close(self) -> None:
        """End the workers (after their current step) and this process's group."""
        if self._closed:
            return
        self._closed = True
        self.ranks.end()
