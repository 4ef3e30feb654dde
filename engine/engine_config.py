"""Engine settings (frozen) and the KV-cache sizing rule."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from models.llama.config import LlamaConfig

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
CPU_KV_BUDGET_BYTES = 1 << 30
GPU_KV_MEMORY_FRACTION = 0.85


@dataclass(frozen=True)
class EngineConfig:
    model: str
    backend: str = "auto"
    dtype: str = "bfloat16"
    device: str | None = None
    max_model_len: int | None = None  # default: the model's context, capped by KV capacity
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    page_size: int = 16
    num_pages: int | None = None  # default: sized from memory
    seed: int = 0
    # Schedule policy for the vm / cuda backends: static longest-processing-time queues by default, the
    # fastest on the GPU (docs/BENCHMARKS.md: 1.44 vs 2.37 ms/token for the dynamic queue, 1B decode).
    policy: str = "lpt"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "page_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_pages is not None and self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {self.num_pages}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def kv_bytes_per_page(config: LlamaConfig, page_size: int, dtype: torch.dtype) -> int:
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * page_size * config.head_dim * elem


def size_kv_cache(cfg: EngineConfig, model: LlamaConfig, device: torch.device,
                  reserve_bytes: int = 0) -> tuple[int, int]:
    """Returns (num_pages, max_model_len) for this engine. `reserve_bytes` of free GPU memory are kept
    back for what the backend allocates after the KV cache is sized (e.g. the cuda backend's packed
    copy of the weights)."""
    per_page = kv_bytes_per_page(model, cfg.page_size, cfg.torch_dtype)
    want_len = cfg.max_model_len or model.max_position_embeddings
    if want_len > model.max_position_embeddings:
        raise ValueError(
            f"max_model_len {want_len} exceeds the model's max_position_embeddings "
            f"{model.max_position_embeddings}")
    if cfg.num_pages is not None:
        num_pages = cfg.num_pages
    else:
        if device.type == "cuda":
            free, _total = torch.cuda.mem_get_info(device)
            budget = int((free - reserve_bytes) * GPU_KV_MEMORY_FRACTION)
        else:
            budget = CPU_KV_BUDGET_BYTES
        pages_for_all = cfg.max_num_seqs * -(-want_len // cfg.page_size)
        if budget < per_page:
            raise ValueError(f"no memory left for the KV cache: budget {budget} bytes < one page ({per_page} bytes)")
        num_pages = max(1, min(budget // per_page, pages_for_all))
    capacity = num_pages * cfg.page_size
    if cfg.max_model_len is not None and cfg.max_model_len > capacity:
        raise ValueError(
            f"max_model_len {cfg.max_model_len} needs {-(-cfg.max_model_len // cfg.page_size)} KV pages "
            f"but only {num_pages} fit (page_size {cfg.page_size})")
    return num_pages, min(want_len, capacity)
