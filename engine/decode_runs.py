"""Runs of decode steps on the device: when the host has nothing to do between two tokens, one engine step
runs several decode steps back to back in the backend (on the GPU: each step's ARGMAX_REDUCE feeds the next,
the host never waits between them) and then gives each step's tokens the same bookkeeping as an ordinary
step's, in order, as they come back.

When: every chunk of the step is a decode whose sampling the backend does (greedy, no logprobs, no
penalties) and no waiting request could take a seat (none waits, or every seat is taken; an arriving request
waits for at most one run). How long: at most
`EngineConfig.decode_steps`, never past any sequence's max_tokens or length limit. Stop strings, EOS and stop
tokens are checked afterwards, token by token: the ids a sequence produced past its stop are dropped (their
KV writes land in pages the finished sequence frees).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import torch

from engine.backends.base import Backend
from engine.errors import EngineFatalError
from engine.outputs import RequestOutput
from engine.request_state import RequestState
from engine.scheduler.requests.request_scheduler import ScheduledChunk, Scheduler, SchedulerOutput
from models.llama.step_batch import StepBatch

Sampled = dict[str, tuple[int, dict[int, float] | None]]
ApplyStep = Callable[[SchedulerOutput, Sampled, float], list[RequestOutput]]
OutputSink = Callable[[list[RequestOutput]], None]


class DecodeRuns:
    """The engine's runs of decode steps. `apply` is the engine's bookkeeping of one step's sampled tokens
    (scheduler, stop checks, outputs); `requests` its live requests (a finished one leaves it)."""

    def __init__(self, backend: Backend, scheduler: Scheduler, requests: Mapping[str, RequestState],
                 apply: ApplyStep, max_steps: int, page_size: int, backend_name: str) -> None:
        self.backend, self.scheduler, self.requests, self.apply = backend, scheduler, requests, apply
        self.max_steps, self.page_size, self.backend_name = max_steps, page_size, backend_name

    def steps_for(self, plan: SchedulerOutput) -> int:
        """How many decode steps `plan` runs back to back (1: an ordinary step)."""
        steps = self.max_steps
        if steps <= 1 or plan.preempted or (self.scheduler.num_waiting and not self._seats_full()):
            return 1
        for chunk in plan.chunks:
            params = self.requests[chunk.seq_id].params
            if not (chunk.is_decode and chunk.samples and params.is_greedy and params.logprobs is None
                    and not params.has_penalties):
                return 1
            seq = chunk.seq
            steps = min(steps, params.max_tokens - seq.num_output_tokens,
                        self.scheduler.max_seq_len - seq.num_tokens + 1)
        return max(1, steps)

    def _seats_full(self) -> bool:
        """Whether every seat is taken: a waiting request then cannot be admitted before a running one
        finishes, and a run ends when the first of them reaches its max_tokens (a stop string or EOS frees
        its seat at the run's end instead)."""
        return self.scheduler.num_running >= self.scheduler.config.max_num_seqs

    def run(self, plan: SchedulerOutput, tables: list[tuple[int, ...]], steps: int,
            sink: OutputSink | None) -> list[RequestOutput]:
        """Run `steps` decode steps of `plan` (block tables `tables` hold every position they write). Outputs go
        to `sink` chunk by chunk as the backend hands the tokens back, or are returned at the end without one."""
        chunks = plan.chunks
        outputs: list[RequestOutput] = []
        current = list(zip(chunks, tables))
        done = 0

        def take(rows: torch.Tensor) -> None:
            nonlocal current, done
            now = time.monotonic()
            first = len(outputs)
            for row in rows.tolist():
                done += 1
                if not current:
                    return  # every sequence stopped: the later steps' ids are dropped
                by_seq = dict(zip((c.seq_id for c in chunks), row))
                step_plan = SchedulerOutput(chunks=tuple(c for c, _t in current), preempted=())
                outputs.extend(self.apply(step_plan, {c.seq_id: (int(by_seq[c.seq_id]), None)
                                                      for c, _t in current}, now))
                # The next step's chunks: the sequences still running, their new token one position further.
                current = [(ScheduledChunk(c.seq, (int(by_seq[c.seq_id]),), c.start_pos + 1, t, True), t)
                           for c, t in current if c.seq_id in self.requests]
            if sink is not None and len(outputs) > first:
                sink(outputs[first:])
                del outputs[first:]

        try:
            batch = StepBatch.build([list(c.token_ids) for c in chunks], [c.start_pos for c in chunks],
                                    [list(t) for t in tables], device=self.backend.batch_device,
                                    page_size=self.page_size)
            self.backend.decode_steps(batch, steps, self.page_size, on_ids=take)
        except EngineFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - the whole run's forward: no single request to blame
            raise EngineFatalError(f"the {self.backend_name} backend's run of {steps} decode steps failed after "
                                   f"{done}: {type(exc).__name__}: {exc}") from exc
        return outputs
