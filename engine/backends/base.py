"""The interface every execution backend implements (torch reference, CPU VM, CUDA megakernel)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

import torch

from engine.backends.step_feed import StepHandle, TokenFeed
from engine.run_stops import RunStops
from engine.run_times import RunTimes
from engine.scheduler.compiler.step_builder_cache import StreamStats
from engine.sampling.results import to_host
from engine.sampling.run_sampler import Records, RunSampler
from models.llama.step_batch import StepBatch

# Takes a chunk of host step records; False ends the run of decode steps early.
OnRecords = Callable[[Records], bool]


class Backend(ABC):
    """Runs one forward step over a paged KV cache that the backend owns.

    The engine's block manager hands out page ids; the backend only reads/writes the pages named in
    each step's block tables.
    """

    name: str = "abstract"
    # Most tokens one step may carry (None: unlimited); the engine caps its token budget to it.
    max_tokens_per_step: int | None = None
    # The CUDA extension whose `sample_rows` samples a step in one launch (engine/sampling/run_sampler.py), where
    # the backend's logits are on a GPU that has it; None: sampling runs as torch ops.
    sampling_kernel: ModuleType | None = None

    @abstractmethod
    def forward(self, batch: StepBatch) -> torch.Tensor:
        """Float32 logits [num_seqs, vocab] of each sequence's last new token."""

    def greedy(self, batch: StepBatch) -> torch.Tensor:
        """Int64 argmax token id per sequence; backends that argmax on device override this."""
        return torch.argmax(self.forward(batch), dim=-1)

    def launch_step(self, batch: StepBatch, greedy: bool, feed: TokenFeed | None = None) -> StepHandle:
        """Start one step of `batch` (greedy: the handle holds the argmax ids; else its logits), with `feed`'s slots
        taken from the previous step's ids (engine/backends/step_feed.py). Here the step runs before this returns,
        its feed read on the host where the ids live elsewhere: correct for every backend. A backend that queues
        steps on a device overrides it to return before the step ran and to feed it there."""
        if feed is not None:
            batch = feed.apply(batch)
        if greedy:
            return StepHandle(ids=self.greedy(batch))
        return StepHandle(logits=self.forward(batch))

    def decode_steps(self, batch: StepBatch, steps: int, page_size: int, on_records: OnRecords,
                     sampler: RunSampler | None = None, stops: RunStops | None = None) -> int:
        """Up to `steps` decode steps in a row: the first runs `batch` (one token per sequence), each next one
        takes the ids the step before it sampled (greedy, or drawn by `sampler` on the logits' device). The
        block tables must already hold every position the steps write. `on_records` receives the host records
        of consecutive steps ("ids" int64 [k, S], plus the sampler's records), in order, as soon as they are
        known, so the caller can use early tokens while later steps run; it returns False to end the run early
        (steps already queued on a device still run and are handed over). `stops`: the rows' stop rules
        (engine/run_stops.py) for a backend that checks them on its device, so that the steps queued after every row
        stopped do no work; such steps are never handed to `on_records`. Returns the number of steps run.
        Here one step after another, each handed over before the next starts, so `on_records` ends the run as soon
        as it sees every row stopped and `stops` has nothing to save; the cuda backend queues the steps on the GPU
        without a host round trip between them and reads their records back in small chunks."""
        for step in range(steps):
            if sampler is None:
                ids = self.greedy(batch)
                records: Records = {"ids": ids[None].cpu()}
            else:
                ids = sampler.step(self.forward(batch), step).long()
                records = to_host(sampler.chunk(step, step + 1))
                records["ids"] = records["ids"].long()
            if not on_records(records) or step + 1 == steps:
                return step + 1
            batch = batch.next_decode(ids, page_size)
        return steps

    def close(self) -> None:
        """Release what outlives the object's references (worker processes; nothing for most backends)."""

    @contextmanager
    def warming_up(self, max_tokens: int, max_seqs: int, max_table_pages: int) -> Iterator[None]:
        """Open around the warm-up's steps (engine/warm_up.py). Backends that compile a stream per step shape compile
        every shape those steps meet (no hosting in a larger stream: engine/cuda/stream_hosting.py), and at the end the
        streams any new shape can run in while serving: up to the largest step the engine schedules (`max_tokens` over
        `max_seqs` sequences, block tables of `max_table_pages`) at each token bucket (step_padding.py host_ladder).
        Nothing here."""
        yield

    def step_token_budget(self, max_tokens: int, max_seqs: int) -> int:
        """The tokens the scheduler may put in one step of at most `max_seqs` sequences, out of the engine's budget
        `max_tokens` (a backend that pads steps leaves room for its dummy sequences' tokens; the rest: all of it)."""
        return max_tokens

    def run_times(self) -> RunTimes:
        """The device time of the runs of decode steps so far and its waits for the host (backends that queue a
        run's steps on a device ahead of the host; the rest run each step as the host asks for it)."""
        return RunTimes()

    def stream_stats(self) -> StreamStats:
        """Compiled-stream cache hits, misses and compile seconds so far (backends that run instruction streams;
        the rest compile nothing)."""
        return StreamStats()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def batch_device(self) -> torch.device:
        """Where the engine builds each step's `StepBatch`: the backend's device, unless it only reads the batch
        on the host (the cuda backend encodes it into its step-args buffer there)."""
        return self.device
