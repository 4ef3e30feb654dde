"""One allocation per activation buffer shared by every compiled stream of a backend.

Each compiled stream's activations (hidden, q, attention partials, the MLP's act, logits, ... sized by its step
shape: engine/instructions/layout.py activation_specs) are views of one flat buffer per name, so the streams a
backend keeps cost the largest of them, not their sum: a 1B stream of 2 048 tokens holds ~220 MB of activations, and
a server keeps dozens of streams. Sharing is safe because steps run one after another on one CUDA stream and nothing
of a step is read after a later step launched: what the host reads of a step queued ahead (its ids, its logits) is
copied in stream order right behind its launch (engine/backends/cuda_launched_step.py), and a synchronous step's
buffers are read before the next one is prepared. No step reads what an earlier step left in a buffer: each step
writes every activation before it reads it (the GPU tests poison a stream's buffers when it is made, so a read of
stale data would show); a run of decode steps, whose steps hand the next one its input, stays on one stream.
A buffer grows by a new allocation when a stream needs more; streams made before keep the old one alive until they are
dropped.
"""
from __future__ import annotations

import math

import torch


class ActivationArena:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._flat: dict[str, torch.Tensor] = {}

    def view(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A `shape` view of `name`'s shared buffer (grown, by a new allocation, where it is smaller)."""
        n = math.prod(shape)
        flat = self._flat.get(name)
        if flat is None or flat.dtype != dtype or flat.numel() < n:
            flat = self._flat[name] = torch.empty(max(1, n), dtype=dtype, device=self.device)
        return flat[:n].view(shape)

    def nbytes(self) -> int:
        """Bytes of the current buffers (older ones still held by streams not counted)."""
        return sum(t.numel() * t.element_size() for t in self._flat.values())
