"""A step the cuda backend queued without waiting for it (Backend.launch_step, the engine's look-ahead): what the
engine reads of it is copied in stream order right behind its launch, so a later step launched on the same
compiled stream (the same buffers) cannot overwrite it first."""
from __future__ import annotations

import torch

from engine.backends.step_feed import StepHandle
from engine.cuda.device_stream import DeviceStream


class LaunchedStep(StepHandle):
    def __init__(self, ds: DeviceStream, num_seqs: int, greedy: bool) -> None:
        # The error record and the ids together, as DeviceStream.check reads them; on the device first (the copy is
        # queued before any later launch), then to pinned host memory behind an event, so wait() waits for this
        # step alone and not for the steps queued after it.
        status = ds.status.clone()
        self._host = torch.empty(status.shape, dtype=status.dtype, pin_memory=True)
        self._host.copy_(status, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()
        self._ds = ds
        ids = status[ds.err_words:ds.err_words + num_seqs].to(torch.int64) if greedy else None
        logits = None if greedy else ds.acts["logits"][:num_seqs].clone()
        super().__init__(ids=ids, logits=logits)

    def wait(self) -> None:
        self._event.synchronize()
        self._ds.check(self._host)  # raises, naming the instruction, where the step failed
