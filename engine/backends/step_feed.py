"""One step launched ahead of the host (the engine's look-ahead, engine/lookahead.py): the step's handle, and the
feed that fills its token slots from the previous step's sampled ids where the host does not know them yet."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from models.llama.step_batch import StepBatch


@dataclass(frozen=True)
class TokenFeed:
    """Token slot `dst[k]` of the step (an index into its flattened `token_ids`) takes `ids[src[k]]`, where `ids` is
    the previous step's sampled ids (int, on the device that produced them). The batch itself holds a placeholder
    there."""

    ids: torch.Tensor
    src: tuple[int, ...]
    dst: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.src) != len(self.dst):
            raise ValueError(f"TokenFeed: {len(self.src)} source rows for {len(self.dst)} token slots")

    def index(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, dst) as int64 index tensors on `device`."""
        return (torch.tensor(self.src, dtype=torch.int64, device=device),
                torch.tensor(self.dst, dtype=torch.int64, device=device))

    def apply(self, batch: StepBatch) -> StepBatch:
        """`batch` with its fed slots filled. On the batch's device: where the ids live on another one (a GPU's ids,
        a host-side batch) this waits for them, which is what makes it correct for every backend."""
        if not self.src:
            return batch
        src, dst = self.index(self.ids.device)
        token_ids = batch.token_ids.clone()
        token_ids[dst.to(token_ids.device)] = self.ids[src].to(token_ids.device, token_ids.dtype)
        return StepBatch(token_ids=token_ids, positions=batch.positions, query_start=batch.query_start,
                         context_lens=batch.context_lens, block_tables=batch.block_tables)


class StepHandle:
    """A launched step. `ids` (int64 [S], each sequence's argmax) for a greedy launch, else `logits` (float32
    [S, vocab]); both on the backend's device and ready to be read in stream order by later device work (sampling,
    the next step's feed). `wait()` blocks until the step ran and raises its device error, if any. This one is the
    synchronous form: the step already ran."""

    def __init__(self, ids: torch.Tensor | None = None, logits: torch.Tensor | None = None) -> None:
        self.ids, self.logits = ids, logits

    def wait(self) -> None:
        """Nothing to wait for: the step ran when it was launched."""
