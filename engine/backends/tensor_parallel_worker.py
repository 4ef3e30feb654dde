"""One worker rank of a tensor-parallel engine (engine/backends/tensor_parallel_backend.py), as its own process:
`python -m engine.backends.tensor_parallel_worker ARGS` with ARGS a pickle of `WorkerArgs`. A fresh interpreter rather
than a multiprocessing child, so the caller's main module (a script without a `__main__` guard, `python -m
engine.cli`, a notebook) is never imported again in the worker."""
from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from models.llama.config import LlamaConfig
from models.llama.kv_cache import FP8_KV, PagedKVCache
from models.llama.kv_scales import kv_scales
from models.llama.step_batch import StepBatch
from models.llama.tensor_parallel import TensorParallelGroup, TensorParallelLlama, load_shard
from models.llama.weights import LlamaWeights


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


def rank_cache(shard: LlamaWeights, num_pages: int, page_size: int, kv_dtype: torch.dtype | None) -> PagedKVCache:
    """A rank's KV cache: its KV heads (shard.config), the weights' dtype unless `kv_dtype`."""
    dtype = kv_dtype or shard.dtype
    return PagedKVCache.allocate(shard.config, num_pages=num_pages, page_size=page_size, dtype=dtype,
                                 scales=kv_scales(shard) if dtype == FP8_KV else None)


def run_worker(a: WorkerArgs) -> None:
    """Load this rank's shard, then run every batch rank 0 broadcasts until it broadcasts None."""
    shard = load_shard(a.checkpoint, a.config, a.rank, a.world, **{**a.load_options, "progress": False})
    dist.init_process_group("gloo", init_method=a.init_method, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=a.timeout_s))
    try:
        model = TensorParallelLlama(shard, TensorParallelGroup.current())
        kv = rank_cache(shard, a.num_pages, a.page_size, a.kv_dtype)
        with torch.inference_mode():
            while True:
                box: list[StepBatch | None] = [None]
                dist.broadcast_object_list(box, src=0)
                if box[0] is None:
                    break
                model(box[0], kv)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        run_worker(pickle.load(f))
