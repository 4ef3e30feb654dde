"""The megakernel over a tensor-parallel group of GPUs (`EngineConfig.tensor_parallel_size` > 1, backend cuda): one
process per GPU, this one rank 0 on GPU 0 with the engine, its scheduler and its sampler, the others workers
(engine/backends/rank_processes.py, engine/backends/tensor_parallel_worker.py run_cuda_worker) on GPUs 1..N-1.

Every rank runs its megakernel shard (models/llama/tensor_parallel.py megakernel_shard: its heads and MLP rows, the
whole embedding and LM head) in a CudaBackend, and its streams average the residual over the ranks inside the kernel
(TP_ALLREDUCE: peer memory over NVLink, engine/cuda/tp_peers.py), so the kernel never leaves the GPU for a
collective. Every rank computes the same ids (a greedy step's LM head over each rank's share of the vocabulary, the
argmax taken across the ranks: TP_ARGMAX) and, in steps that return them, the same logits; rank 0's are the
engine's. Rank 0 sends each backend call
to the workers over the gloo group before making it itself (their launches meet on the GPUs): single steps, and
runs of greedy decode steps whole (the device feeds each step's ids to the next on every rank). A run is never ended
early by the host here (a rank's launches must match the others'): it ends when the device sees every row stop or
after its steps; a run of sampled steps runs step by step. A worker that exited fails the next call, naming it; a
rank lost inside a step makes the others' kernels fail by their watchdog, naming the all-reduce.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from engine.backends.base import Backend, OnRecords
from engine.backends.cuda_backend import CudaBackend
from engine.backends.rank_collectives import all_gather_objects
from engine.backends.rank_processes import RankProcesses
from engine.backends.tensor_parallel_worker import DEFAULT_TP_TIMEOUT_S, WorkerArgs
from engine.cuda.tp_peers import TpPeers
from engine.errors import EngineFatalError
from engine.run_stops import RunStops
from engine.run_times import RunTimes
from engine.sampling.run_sampler import RunSampler
from engine.scheduler.compiler.step_builder_cache import StreamStats
from models.llama.config import LlamaConfig
from models.llama.step_batch import StepBatch
from models.llama.tensor_parallel import check_tensor_parallel, load_megakernel_shard

T = TypeVar("T")


class TensorParallelCudaBackend(Backend):
    name = "cuda"

    def __init__(self, checkpoint: str, config: LlamaConfig, load_options: dict[str, Any], num_pages: int,
                 page_size: int, world: int, timeout_s: float = DEFAULT_TP_TIMEOUT_S, **cuda_options: Any) -> None:
        """`load_options`: load_weights' keywords (each rank reads its shard onto its GPU); `cuda_options`: the cuda
        backend's keywords, the same on every rank."""
        check_tensor_parallel(config, world, vocab_parallel=False)
        if dist.is_initialized():
            raise RuntimeError("tensor_parallel_size > 1: this process already belongs to a torch.distributed group "
                               "(one tensor-parallel engine per process)")
        if torch.cuda.device_count() < world:
            raise ValueError(f"tensor_parallel_size {world} runs one rank per GPU; {torch.cuda.device_count()} visible")
        self.world = world
        self.ranks = RankProcesses(world, lambda rank, init: WorkerArgs(
            rank, world, init, checkpoint, config, load_options, num_pages, page_size, None, timeout_s, "cuda",
            dict(cuda_options)), backend="cuda")
        self._closed = False
        self._peers: TpPeers | None = None
        try:
            torch.cuda.set_device(0)
            shard = load_megakernel_shard(checkpoint, config, 0, world,
                                          **{**load_options, "device": torch.device("cuda", 0)})
            self.ranks.join(timeout_s)
            self.rank0 = CudaBackend(shard, num_pages, page_size, tp_world=world, tp_rank=0, **cuda_options)
            del shard  # the backend keeps its packed copy
            self._peers = TpPeers(0, world, self.rank0.dims, self.rank0.max_tokens_per_step,
                                  self.rank0.kernel.tp_ll_tokens, self.rank0.device, all_gather_objects)
            self.rank0.attach_tp(self._peers)
        except BaseException:
            self.ranks.stop()
            raise
        self.max_tokens_per_step = self.rank0.max_tokens_per_step
        self.sampling_kernel = self.rank0.sampling_kernel

    @property
    def device(self) -> torch.device:
        return self.rank0.device

    @property
    def batch_device(self) -> torch.device:
        return self.rank0.batch_device

    def _command(self, *cmd: object) -> None:
        if self._closed:
            raise EngineFatalError("the tensor-parallel backend is closed")
        with self.ranks.collective():
            self.ranks.command(cmd)

    def _call(self, cmd: tuple[object, ...], run: Callable[[], T]) -> T:
        """`cmd` to the workers, then rank 0's part of it (`run`); a failure there names a worker that exited."""
        self._command(*cmd)
        try:
            return run()
        except RuntimeError:  # a rank lost inside the step: the kernel's all-reduce timed out waiting for it
            self.ranks.check(grace_s=2.0)
            raise

    def forward(self, batch: StepBatch) -> torch.Tensor:
        return self._call(("forward", batch), lambda: self.rank0.forward(batch))

    def greedy(self, batch: StepBatch) -> torch.Tensor:
        return self._call(("greedy", batch), lambda: self.rank0.greedy(batch))

    def decode_steps(self, batch: StepBatch, steps: int, page_size: int, on_records: OnRecords,
                     sampler: RunSampler | None = None, stops: RunStops | None = None) -> int:
        if sampler is not None:  # the workers have no sampler: one step at a time, each through forward
            return super().decode_steps(batch, steps, page_size, on_records, sampler, stops)
        # Every record handed over, the run never cut short from here: the workers launch all of its steps
        return self._call(("decode_steps", batch, steps, page_size, stops), lambda: self.rank0.decode_steps(
            batch, steps, page_size, lambda records: on_records(records) or True, None, stops))

    @property
    def timing(self) -> bool:
        return self.rank0.timing

    @timing.setter
    def timing(self, on: bool) -> None:
        """The kernel's timing records on every rank (each then runs its steps one launch at a time, as rank 0 does):
        rank 0's are `rank0.last`'s (profiles)."""
        self._command("timing", on)
        self.rank0.timing = on

    def stream_stats(self) -> StreamStats:
        return self.rank0.stream_stats()

    def run_times(self) -> RunTimes:
        return self.rank0.run_times()

    def step_token_budget(self, max_tokens: int, max_seqs: int) -> int:
        return self.rank0.step_token_budget(max_tokens, max_seqs)

    @contextmanager
    def warming_up(self, max_tokens: int, max_seqs: int, max_table_pages: int) -> Iterator[None]:
        # The end of a warm-up runs steps (the hosts of new shapes): every rank runs its own at the same time
        self._command("warm_up", max_tokens, max_seqs, max_table_pages)
        warm = self.rank0.warming_up(max_tokens, max_seqs, max_table_pages)
        warm.__enter__()
        try:
            yield
        finally:
            self._command("warmed_up")
            warm.__exit__(None, None, None)

    def close(self) -> None:
        """End the workers and this process's group and exchange memory."""
        if self._closed:
            return
        self._closed = True
        self.ranks.end(self._release)

    def _release(self) -> None:
        self.rank0.close()
        if self._peers is not None:
            self._peers.close()
