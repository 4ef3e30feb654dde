"""Backend selection. `auto` → cuda (the megakernel) on an sm_90 GPU, else the torch reference."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.backends.base import Backend
from engine.engine_config import BACKEND_NAMES
from models.llama.config import LlamaConfig
from models.llama.weights import LlamaWeights


@dataclass(frozen=True)
class BackendChoice:
    name: str  # the concrete backend: torch | vm | cuda
    device: torch.device
    reason: str  # why `auto` chose it (shown to users)


def has_sm90_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def resolve_backend(requested: str, device: str | None = None) -> BackendChoice:
    if requested not in BACKEND_NAMES:
        raise ValueError(f"backend must be one of {BACKEND_NAMES}, got {requested!r}")
    gpu = torch.cuda.is_available()
    if requested == "auto":
        if has_sm90_gpu():
            return BackendChoice("cuda", torch.device("cuda"), "sm_90 GPU found: megakernel")
        if gpu:
            return BackendChoice("torch", torch.device("cuda"), "GPU is not sm_90: torch reference on GPU")
        return BackendChoice("torch", torch.device("cpu"), "no GPU: torch reference on the CPU")
    if requested == "cuda":
        if not has_sm90_gpu():
            raise RuntimeError("backend 'cuda' needs an sm_90 (H100/H200) GPU; none is visible")
        return BackendChoice("cuda", torch.device("cuda"), "requested")
    if requested == "vm":
        return BackendChoice("vm", torch.device("cpu"), "requested")
    dev = torch.device(device) if device else torch.device("cuda" if gpu else "cpu")
    return BackendChoice("torch", dev, "requested")


def create_backend(choice: BackendChoice, weights: LlamaWeights, num_pages: int, page_size: int,
                   **options: object) -> Backend:
    """Instantiate the chosen backend; imports are lazy so CPU machines never load CUDA code."""
    if choice.name == "torch":
        from engine.backends.torch_backend import TorchBackend
        return TorchBackend(weights, num_pages=num_pages, page_size=page_size, device=choice.device,
                            **options)  # type: ignore[arg-type]
    if choice.name == "vm":
        from engine.backends.vm_backend import VMBackend
        return VMBackend(weights, num_pages=num_pages, page_size=page_size, **options)  # type: ignore[arg-type]
    if choice.name == "cuda":
        from engine.backends.cuda_backend import CudaBackend
        return CudaBackend(weights, num_pages=num_pages, page_size=page_size, **options)  # type: ignore[arg-type]
    raise ValueError(f"unknown backend {choice.name!r}")


def create_tensor_parallel_backend(choice: BackendChoice, checkpoint: str, config: LlamaConfig,
                                   load_options: dict[str, Any], num_pages: int, page_size: int, world: int,
                                   **options: Any) -> Backend:
    """The chosen backend over `world` tensor-parallel ranks, each reading its shard of `checkpoint` itself: the
    torch reference's ranks as processes on CPUs (gloo), the megakernel's as processes on GPUs (one each) or, on the
    vm backend, every rank's VM in this process."""
    if choice.name == "torch":
        from engine.backends.tensor_parallel_backend import TensorParallelBackend
        return TensorParallelBackend(checkpoint, config, load_options, num_pages, page_size, choice.device, world,
                                     **options)
    if choice.name == "cuda":
        from engine.backends.cuda_tensor_parallel import TensorParallelCudaBackend
        return TensorParallelCudaBackend(checkpoint, config, load_options, num_pages, page_size, world, **options)
    if choice.name == "vm":
        from engine.backends.vm_tensor_parallel import TensorParallelVMBackend
        from models.llama.tensor_parallel import load_megakernel_shard
        shards = [load_megakernel_shard(checkpoint, config, rank, world, **load_options) for rank in range(world)]
        return TensorParallelVMBackend(shards, num_pages, page_size, **options)
    raise ValueError(f"unknown backend {choice.name!r}")
