"""The reference backend: models/llama's PyTorch Llama over a paged KV cache (CPU or any GPU)."""
from __future__ import annotations

import torch

from engine.backends.base import Backend
from models.llama.kv_cache import FP8_KV, PagedKVCache
from models.llama.kv_scales import kv_scales
from models.llama.model import LlamaModel
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, weights: LlamaWeights, num_pages: int, page_size: int, device: torch.device,
                 kv_dtype: torch.dtype | None = None):
        """`kv_dtype`: the KV cache's dtype (default the weights' activations'; float8_e4m3fn: fp8 pages)."""
        self._device = torch.device(device)
        self.model = LlamaModel(weights)
        kv_dtype = kv_dtype or weights.dtype
        self.kv = PagedKVCache.allocate(
            weights.config, num_pages=num_pages, page_size=page_size, dtype=kv_dtype, device=self._device,
            scales=kv_scales(weights) if kv_dtype == FP8_KV else None,
        )

    @property
    def device(self) -> torch.device:
        return self._device

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        return self.model.forward(batch, self.kv)
