"""One worker rank of a tensor-parallel engine (engine/backends/rank_processes.py), as its own process:
`python -m engine.backends.tensor_parallel_worker ARGS` with ARGS a pickle of `WorkerArgs`. It loads its shard, joins
the group and runs what rank 0 broadcasts until rank 0 broadcasts None: a StepBatch for the torch reference
(engine/backends/tensor_parallel_backend.py), or a backend call for the megakernel's ranks
(engine/backends/cuda_tensor_parallel.py: `("forward" | "greedy", batch)`, `("decode_steps", batch, steps,
page_size, stops)`, `("warm_up", max_tokens, max_seqs, max_table_pages)` then `("warmed_up",)`,
`("timing", on)`)."""
from __future__ import annotations

import pickle
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from models.llama.config import LlamaConfig
from models.llama.kv_cache import FP8_KV, PagedKVCache
from models.llama.kv_scales import kv_scales
from models.llama.tensor_parallel import TensorParallelGroup, TensorParallelLlama, load_megakernel_shard, load_shard
from models.llama.weights import LlamaWeights

# How long a collective may wait for the other ranks before the step fails (a rank that died inside a step).
DEFAULT_TP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WorkerArgs:
    rank: int
    world: int
    init_method: str  # the group's rendezvous (a file:// store)
    checkpoint: str
    config: LlamaConfig
    load_options: dict[str, Any]  # load_weights' keywords
    num_pages: int
    page_size: int
    kv_dtype: torch.dtype | None
    timeout_s: float
    backend: str = "torch"  # or "cuda": the megakernel on GPU `rank`
    options: dict[str, Any] = field(default_factory=dict)  # the cuda backend's keywords


def rank_cache(shard: LlamaWeights, num_pages: int, page_size: int, kv_dtype: torch.dtype | None) -> PagedKVCache:
    """A rank's KV cache: its KV heads (shard.config), the weights' dtype unless `kv_dtype`."""
    dtype = kv_dtype or shard.dtype
    return PagedKVCache.allocate(shard.config, num_pages=num_pages, page_size=page_size, dtype=dtype,
                                 scales=kv_scales(shard) if dtype == FP8_KV else None)


def _join(a: WorkerArgs) -> None:
    if dist.is_initialized():  # started by torchrun: in the group before its arguments came (torchrun_launch.py)
        return
    dist.init_process_group("gloo", init_method=a.init_method, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=a.timeout_s))


def _next_command() -> Any:
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def run_torch_worker(a: WorkerArgs) -> None:
    """The reference model's rank: every batch rank 0 broadcasts, until it broadcasts None."""
    shard = load_shard(a.checkpoint, a.config, a.rank, a.world, **{**a.load_options, "progress": False})
    _join(a)
    try:
        model = TensorParallelLlama(shard, TensorParallelGroup.current())
        kv = rank_cache(shard, a.num_pages, a.page_size, a.kv_dtype)
        with torch.inference_mode():
            while (batch := _next_command()) is not None:
                model(batch, kv)
    finally:
        dist.destroy_process_group()


def run_cuda_worker(a: WorkerArgs) -> None:
    """The megakernel's rank on GPU `a.rank`: the backend calls rank 0 makes, in its order, until None. Their results
    stay here (every rank computes the same ids, and logits where a call returns them); their all-reduces and
    cross-rank argmaxes meet rank 0's on the GPUs."""
    from engine.backends.cuda_backend import CudaBackend
    from engine.backends.rank_collectives import all_gather_objects
    from engine.cuda.tp_peers import TpPeers

    torch.cuda.set_device(a.rank)
    device = torch.device("cuda", a.rank)
    shard = load_megakernel_shard(a.checkpoint, a.config, a.rank, a.world,
                                  **{**a.load_options, "progress": False, "device": device})
    _join(a)
    peers = None
    try:
        backend = CudaBackend(shard, a.num_pages, a.page_size, tp_world=a.world, tp_rank=a.rank, **a.options)
        peers = TpPeers(a.rank, a.world, backend.dims, backend.max_tokens_per_step, backend.kernel.tp_ll_tokens,
                        device, all_gather_objects)
        backend.attach_tp(peers)
        warm: AbstractContextManager[None] | None = None
        while (cmd := _next_command()) is not None:
            name, *args = cmd
            if name in ("forward", "greedy"):
                getattr(backend, name)(*args)
            elif name == "decode_steps":
                batch, steps, page_size, stops = args
                backend.decode_steps(batch, steps, page_size, lambda records: True, None, stops)
            elif name == "timing":  # the kernel's timing records on (profiles: rank 0's record, every rank's path)
                backend.timing = bool(args[0])
            elif name == "warm_up":
                warm = backend.warming_up(*args)
                warm.__enter__()
            elif name == "warmed_up" and warm is not None:
                warm.__exit__(None, None, None)
                warm = None
            else:
                raise RuntimeError(f"tensor-parallel rank {a.rank}: unknown command {name!r}")
        backend.close()
    finally:
        if peers is not None:
            peers.close()
        dist.destroy_process_group()


def run_worker(a: WorkerArgs) -> None:
    (run_cuda_worker if a.backend == "cuda" else run_torch_worker)(a)


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        run_worker(pickle.load(f))
