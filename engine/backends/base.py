"""The interface every execution backend implements (torch reference, CPU VM, CUDA megakernel)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

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

    def decode_steps(self, batch: StepBatch, steps: int, page_size: int,
                     on_ids: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
        """Int64 greedy ids [steps, S] of `steps` decode steps in a row: the first runs `batch` (one token per
        sequence), each next one takes the ids the step before it sampled. The block tables must already hold
        every position the steps write. `on_ids`, if given, receives the ids of consecutive steps ([k, S], in
        order, all steps once) as soon as they are known, so the caller can use early tokens while later steps
        run. Here one step after another through `greedy`; the cuda backend keeps the whole run on the GPU (the
        ids feed back inside the kernel) and reads them back in small chunks."""
        rows = []
        for step in range(steps):
            ids = self.greedy(batch)
            rows.append(ids)
            if on_ids is not None:
                on_ids(ids[None])
            if step + 1 < steps:
                batch = batch.next_decode(ids, page_size)
        return torch.stack(rows)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def batch_device(self) -> torch.device:
        """Where the engine builds each step's `StepBatch`: the backend's device, unless it only reads the batch
        on the host (the cuda backend encodes it into its step-args buffer there)."""
        return self.device
