"""The reference backend: models/llama's PyTorch Llama over a paged KV cache (CPU or any GPU)."""
from __future__ import annotations

import torch

from engine.backends.base import Backend
from models.llama.kv_cache import PagedKVCache
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
        self.kv = PagedKVCache.allocate(
            weights.config, num_pages=num_pages, page_size=page_size,
            dtype=kv_dtype or weights.dtype, device=self._device,
        )

    @property
    def device(self) -> torch.device:
        return self._device

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        return self.model.forward(batch, self.kv)
