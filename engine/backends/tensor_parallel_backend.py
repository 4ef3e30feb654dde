"""The torch reference model over a tensor-parallel group of processes (`EngineConfig.tensor_parallel_size`): this
process is rank 0 and starts one worker process per other rank (engine/backends/tensor_parallel_worker.py); every
rank reads only its shard of the weights from the checkpoint (models/llama/tensor_parallel.py load_shard:
Megatron-style, all-reduces after O and down, logits all-gathered) and holds its KV heads.

Each step rank 0 broadcasts the StepBatch, every rank runs it, and rank 0 hands the whole logits to the engine: the
engine, its scheduler and its sampler stay in this one process, so sampling happens once and no token has to be
sent back. The ranks run on CPUs with gloo; GPUs (NCCL, one per rank, the megakernel per rank) are not built yet. A
worker that exits makes the next step fail with an error naming it (checked before every step; a rank lost inside a
step ends the collective by the group's timeout), never a hang; `close()` ends the workers and the group.
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from engine.backends.base import Backend
from engine.backends.tensor_parallel_worker import WorkerArgs, rank_cache
from engine.errors import EngineFatalError
from models.llama.config import LlamaConfig
from models.llama.step_batch import StepBatch
from models.llama.tensor_parallel import TensorParallelGroup, TensorParallelLlama, check_tensor_parallel, load_shard

# How long a collective may wait for the other ranks before the step fails (a rank that died inside a step).
DEFAULT_TP_TIMEOUT_S = 60.0


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
        # The workers import this very code, wherever it is imported from here (an installed package or a checkout)
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self._workers: list[subprocess.Popen[bytes]] = []
        for rank in range(1, world):
            args_path = os.path.join(self._rendezvous, f"rank{rank}.pkl")
            with open(args_path, "wb") as f:
                pickle.dump(WorkerArgs(rank, world, init, checkpoint, config, load_options, num_pages, page_size,
                                       kv_dtype, timeout_s), f)
            self._workers.append(subprocess.Popen(
                [sys.executable, "-m", "engine.backends.tensor_parallel_worker", args_path], env=env))
        self._closed = False
        try:
            shard = load_shard(checkpoint, config, 0, world, **load_options)
            dist.init_process_group("gloo", init_method=init, rank=0, world_size=world,
                                    timeout=timedelta(seconds=timeout_s))
        except BaseException:
            self._stop_workers()
            raise
        self.model = TensorParallelLlama(shard, TensorParallelGroup.current())
        self.kv = rank_cache(shard, num_pages, page_size, kv_dtype)

    @property
    def device(self) -> torch.device:
        return self._device

    def _check_workers(self) -> None:
        for rank, proc in enumerate(self._workers, start=1):
            if proc.poll() is not None:
                raise EngineFatalError(f"tensor-parallel rank {rank} exited (exit code {proc.returncode}); "
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
            if all(p.poll() is None for p in self._workers):
                dist.broadcast_object_list([None], src=0)
        finally:
            dist.destroy_process_group()
            self._stop_workers()

    def _stop_workers(self) -> None:
        for proc in self._workers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self._rendezvous, ignore_errors=True)
