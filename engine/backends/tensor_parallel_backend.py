"""The torch reference model over a tensor-parallel group of processes (`EngineConfig.tensor_parallel_size`): this
process is rank 0 and spawns one worker per other rank; every rank reads only its shard of the weights from the
checkpoint (models/llama/tensor_parallel.py load_shard: Megatron-style, all-reduces after O and down, logits
all-gathered) and holds its KV heads.

Each step rank 0 broadcasts the StepBatch, every rank runs it, and rank 0 hands the whole logits to the engine: the
engine, its scheduler and its sampler stay in this one process, so sampling happens once and no token has to be
sent back. The ranks run on CPUs with gloo; GPUs (NCCL, one per rank, the megakernel per rank) are not built yet. A
worker that exits makes the next step fail with an error naming it (checked before every step; a rank lost inside a
step ends the collective by the group's timeout), never a hang; `close()` ends the workers and the group.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from engine.backends.base import Backend
from engine.errors import EngineFatalError
from models.llama.kv_cache import FP8_KV, PagedKVCache
from models.llama.kv_scales import kv_scales
from models.llama.step_batch import StepBatch
from models.llama.config import LlamaConfig
from models.llama.tensor_parallel import TensorParallelGroup, TensorParallelLlama, check_tensor_parallel, load_shard
from models.llama.weights import LlamaWeights

# How long a collective may wait for the other ranks before the step fails (a rank that died inside a step).
DEFAULT_TP_TIMEOUT_S = 60.0


def _rank_cache(shard: LlamaWeights, num_pages: int, page_size: int, kv_dtype: torch.dtype | None) -> PagedKVCache:
    dtype = kv_dtype or shard.dtype
    return PagedKVCache.allocate(shard.config, num_pages=num_pages, page_size=page_size, dtype=dtype,
                                 scales=kv_scales(shard) if dtype == FP8_KV else None)


def _worker(rank: int, world: int, init: str, checkpoint: str, config: LlamaConfig, load_options: dict[str, Any],
            num_pages: int, page_size: int, kv_dtype: torch.dtype | None, timeout_s: float) -> None:
    """Rank `rank`'s loop: load its shard, then run every batch rank 0 broadcasts until it broadcasts None."""
    shard = load_shard(checkpoint, config, rank, world, **{**load_options, "progress": False})
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    try:
        model = TensorParallelLlama(shard, TensorParallelGroup.current())
        kv = _rank_cache(shard, num_pages, page_size, kv_dtype)
        with torch.inference_mode():
            while True:
                box: list[StepBatch | None] = [None]
                dist.broadcast_object_list(box, src=0)
                if box[0] is None:
                    break
                model(box[0], kv)
    finally:
        dist.destroy_process_group()


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
            raise ValueError(f"tensor_parallel_size {world} runs the torch backend on CPUs for now (device "
                             f"{device!r}: the GPU ranks, NCCL and the megakernel per rank, are not built)")
        self.world = world
        self._device = torch.device("cpu")
        self._rendezvous = tempfile.mkdtemp(prefix="megakernel-tp-")
        init = "file://" + os.path.join(self._rendezvous, "store")
        ctx = mp.get_context("spawn")
        self._workers = []
        for rank in range(1, world):
            proc = ctx.Process(target=_worker, name=f"megakernel-tp-rank{rank}", daemon=True,
                               args=(rank, world, init, checkpoint, config, load_options, num_pages, page_size,
                                     kv_dtype, timeout_s))
            proc.start()
            self._workers.append(proc)
        shard = load_shard(checkpoint, config, 0, world, **load_options)
        dist.init_process_group("gloo", init_method=init, rank=0, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        self.model = TensorParallelLlama(shard, TensorParallelGroup.current())
        self.kv = _rank_cache(shard, num_pages, page_size, kv_dtype)
        self._closed = False

    @property
    def device(self) -> torch.device:
        return self._device

    def _check_workers(self) -> None:
        for rank, proc in enumerate(self._workers, start=1):
            if not proc.is_alive():
                raise EngineFatalError(f"tensor-parallel rank {rank} exited (exit code {proc.exitcode}); "
                                       "the engine cannot run without it")

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        if self._closed:
            raise EngineFatalError("the tensor-parallel backend is closed")
        self._check_workers()
        try:
            dist.broadcast_object_list([batch], src=0)
            return self.model(batch, self.kv)
        except (RuntimeError, dist.DistBackendError) as exc:
            self._check_workers()  # a rank that died mid-step: name it
            raise EngineFatalError(f"tensor-parallel step failed: {exc}") from exc

    def close(self) -> None:
        """End the workers (after their current step) and this process's group."""
        if self._closed:
            return
        self._closed = True
        try:
            if all(p.is_alive() for p in self._workers):
                dist.broadcast_object_list([None], src=0)
        finally:
            for proc in self._workers:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.terminate()
            dist.destroy_process_group()
            shutil.rmtree(self._rendezvous, ignore_errors=True)
