"""Collectives over the default process group that a tensor-parallel backend's ranks all take part in (rank 0 in
the engine's process, the others in engine/backends/tensor_parallel_worker.py)."""
from __future__ import annotations

from typing import Any

import torch.distributed as dist


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (over the default group)."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
