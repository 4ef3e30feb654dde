"""The interface every execution backend implements (torch reference, CPU VM, CUDA megakernel)."""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from models.llama.step_batch import StepBatch


class Backend(ABC):
    """Runs one forward step over a paged KV cache that the backend owns.

    The engine's block manager hands out page ids; the backend only reads/writes the pages named in
    each step's block tables.
    """

    name: str = "abstract"
    # Most tokens one step may carry (None: unlimited); the engine caps its token budget to it.
    max_tokens_per_step: int | None = None

    @abstractmethod
    def forward(self, batch: StepBatch) -> torch.Tensor:
        """Float32 logits [num_seqs, vocab] of each sequence's last new token."""

    def greedy(self, batch: StepBatch) -> torch.Tensor:
        """Int64 argmax token id per sequence; backends that argmax on device override this."""
        return torch.argmax(self.forward(batch), dim=-1)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")
