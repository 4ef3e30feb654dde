"""One step of look-ahead (EngineConfig.async_scheduling): while step N runs on the device, the host schedules and
launches step N+1, then postprocesses N (detokenise, stop checks, outputs) while N+1 runs, so the host is not
between every two steps where it has work to do (prompt chunks, requests arriving or waiting for a seat).

Step N+1 is scheduled as if every sequence that samples in N produced one token: it holds a placeholder token
(engine/scheduler/requests/lookahead.py) whose slot in N+1's batch the backend fills from N's sampled ids on the
device (a TokenFeed, engine/backends/step_feed.py). When N's ids reach the host they replace the placeholders; a
sequence that ended at N (a stop, its length, an abort, a failure) leaves, its pages freed as without look-ahead, and
its row of N+1 is dropped: N+1's write into its pages lands before any later step can reuse them (stream order).
A sequence sure to end at N by length gets no placeholder, so N+1 does not compute a token for it.

Where look-ahead is unsafe the step runs without it (N's tokens first, then N+1 as before): a plan that preempted,
a scored prompt chunk (prompt_logprobs: its logits are read on the host and the next chunk depends on them), a
request with penalties that holds a placeholder (its token history is not known), and a plan the engine would run
as a run of decode steps (engine/decode_runs.py), which needs every token on the host; the next engine step then
starts without a step in flight. Seeded sampling draws the same tokens: a request's noise counter is its number of
generated tokens, placeholders included, as it would be after step N's tokens.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from engine.backends.base import Backend
from engine.decode_runs import DecodeRuns
from engine.errors import EngineFatalError
from engine.lookahead_step import InFlight, launch_step, step_tokens
from engine.outputs import RequestOutput
from engine.request_state import RequestState
from engine.sampling.run_sampler import NoiseTables
from engine.scheduler.requests.lookahead import advance_ahead, resolve
from engine.scheduler.requests.request_scheduler import Scheduler, SchedulerOutput
from engine.sequence import SequenceStatus


@dataclass(frozen=True)
class StepHooks:
    """The engine's own parts of a step: `schedule` (preemptions counted), `finish_at_length` (the outputs of
    plan.finished), `run_plan` (a scheduled plan without look-ahead: a run of decode steps or one step, the step
    counted), `postprocess` (one request's token: its stop checks and output, a failure finishing it alone) /
    `fail` (one request's failure), `count_step`, `sink` (the engine's output sink, where a run of decode steps
    streams its outputs as it goes; None: a run returns them)."""

    schedule: Callable[[], SchedulerOutput]
    finish_at_length: Callable[[SchedulerOutput, float], list[RequestOutput]]
    run_plan: Callable[[SchedulerOutput], list[RequestOutput]]
    postprocess: Callable[[RequestState, int, dict[int, float] | None, float], RequestOutput]
    fail: Callable[[RequestState, str, float], RequestOutput]
    count_step: Callable[[], None]
    sink: Callable[[], Callable[[list[RequestOutput]], None] | None]


class LookAhead:
    def __init__(self, backend: Backend, scheduler: Scheduler, requests: Mapping[str, RequestState],
                 runs: DecodeRuns, noise: NoiseTables, page_size: int, backend_name: str, hooks: StepHooks) -> None:
        self.backend, self.scheduler, self.requests, self.runs = backend, scheduler, requests, runs
        self.noise, self.page_size, self.backend_name, self.hooks = noise, page_size, backend_name, hooks
        self.inflight: InFlight | None = None  # the step launched and not yet postprocessed

    def step(self) -> list[RequestOutput]:
        """One engine step: the outputs of the step in flight (if any), with the next one launched behind it."""
        prev, self.inflight = self.inflight, None
        plan = self.hooks.schedule()
        if prev is not None and not plan.is_empty and self._may_overlap(plan, prev):
            self.hooks.count_step()
            nxt = self._launch(plan, prev)
            outputs = self._apply(prev)  # step N's tokens while N+1 runs
            outputs += self.hooks.finish_at_length(plan, time.monotonic())  # after N's tokens: its last may be one
            self._mark(nxt)
            self.inflight = nxt
            return outputs
        outputs = self._apply(prev) if prev is not None else []
        outputs += self.hooks.finish_at_length(plan, time.monotonic())
        plan = self._live(plan)
        if plan.is_empty:
            return outputs
        if prev is None and self._may_start(plan):
            self.hooks.count_step()
            self.inflight = self._launch(plan, None)
            self._mark(self.inflight)
            return outputs
        sink = self.hooks.sink()
        if sink is not None and outputs:
            # A run streams its outputs to the sink while it runs: the step in flight's (the same requests' earlier
            # tokens) go first, else a stream would see a request's token k after its tokens k+1...
            sink(outputs)
            outputs = []
        return outputs + self.hooks.run_plan(plan)

    # ---------------------------------------------------------------- when
    def _may_start(self, plan: SchedulerOutput) -> bool:
        if plan.preempted or self.runs.steps_for(plan) > 1:
            return False
        return not any(self._scored(c.seq_id, c.samples) for c in plan.chunks)

    def _may_overlap(self, plan: SchedulerOutput, prev: InFlight) -> bool:
        if not self._may_start(plan):
            return False
        return not any(self.requests[c.seq_id].params.has_penalties and c.seq_id in prev.placeholders
                       for c in plan.chunks)

    def _scored(self, seq_id: str, samples: bool) -> bool:
        """A chunk inside a prompt whose tokens are scored (engine/prompt_scoring.py) runs without look-ahead."""
        state = self.requests.get(seq_id)
        return state is None or (state.prompt_logprobs is not None and not samples)

    # ---------------------------------------------------------------- how
    def _fatal(self, exc: Exception) -> EngineFatalError:
        """A failure of the whole step launched ahead (its launch or its run on the device): no request to blame."""
        return EngineFatalError(f"engine step failed in the {self.backend_name} backend's forward (a step launched "
                                f"ahead): {type(exc).__name__}: {exc}")

    def _launch(self, plan: SchedulerOutput, prev: InFlight | None) -> InFlight:
        try:
            return launch_step(self.backend, plan, prev, self.requests, self.noise, self.page_size, self.runs.eos_ids)
        except Exception as exc:  # noqa: BLE001 - the whole step's forward: no single request to blame
            raise self._fatal(exc) from exc

    def _mark(self, step: InFlight) -> None:
        """The step's chunks count as computed; the sequences that may go on after it get their placeholder."""
        continuing: set[str] = set()
        for i in step.rows:
            chunk = step.plan.chunks[i]
            state = self.requests.get(chunk.seq_id)
            if state is None or state.seq is not chunk.seq:
                continue
            seq = state.seq
            if (seq.num_output_tokens + 1 < state.params.max_tokens
                    and seq.num_tokens + 1 < self.scheduler.max_seq_len):  # else its token surely ends it
                continuing.add(chunk.seq_id)
        held = advance_ahead(self.scheduler, step.plan, continuing)
        step.placeholders = {sid: (self.requests[sid].seq, index) for sid, index in held.items()}

    def _apply(self, step: InFlight) -> list[RequestOutput]:
        """Step N's tokens in place of their placeholders, then stop checks and outputs per request."""
        try:
            sampled, failed = step_tokens(step, self.requests)
        except Exception as exc:  # noqa: BLE001 - the step itself failed on the device
            raise self._fatal(exc) from exc
        now = time.monotonic()
        outputs = [self.hooks.fail(self.requests[sid], message, now) for sid, message in failed.items()]
        for sid, (token, logprob) in sampled.items():
            state = self.requests[sid]
            held = step.placeholders.get(sid)
            resolve(state.seq, held[1] if held is not None and held[0] is state.seq else None, token)
            outputs.append(self.hooks.postprocess(state, token, logprob, now))
        return outputs

    def _live(self, plan: SchedulerOutput) -> SchedulerOutput:
        """`plan`'s chunks of sequences still running, with their real tokens (placeholders resolved since)."""
        chunks = tuple(replace(c, token_ids=c.seq.token_slice(c.start_pos, c.context_len)) for c in plan.chunks
                       if self.scheduler.get(c.seq_id) is c.seq and c.seq.status is SequenceStatus.RUNNING)
        return SchedulerOutput(chunks=chunks, preempted=plan.preempted, finished=plan.finished)
