"""Runs of decode steps on the device: when every scheduled chunk is a decode, one engine step runs several
decode steps back to back in the backend (on the GPU: each step's tokens feed the next there, greedy through
the kernel's ARGMAX_REDUCE, sampled through engine/sampling on the GPU; the host never waits between them) and
gives each step's tokens the same bookkeeping as an ordinary step's, in order, as they come back.

When: every chunk of the step is a decode and no waiting request could take a seat (none waits, or every seat
is taken). How long: at most `EngineConfig.decode_steps`, never past any sequence's max_tokens or length limit;
and the run ends early, within the backend's look-ahead, once every sequence in it has stopped or a request
waits for a free seat (in the scheduler, or on its way to it: a server's queued request, LLMEngine.arrivals_waiting). Stop strings, EOS and stop tokens are checked as the tokens come back: the ids a
sequence produced past its stop are dropped (their KV writes land in pages the finished sequence frees). The
backend also gets the rows' stop rules (engine/run_stops.py: EOS, stop ids, length), which the cuda backend
checks on the GPU, so the steps it queued after every row stopped do no work; it never hands over their records,
and a run it ends there leaves a row the host still runs (none, as the device rules are a subset of the host's)
to the next engine step.
Sampling noise is counted per request (its number of generated tokens), so a seeded request draws the same
tokens in a run as step by step.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from engine.backends.base import Backend
from engine.errors import EngineFatalError
from engine.outputs import RequestOutput
from engine.request_state import RequestState
from engine.run_stops import RunStops, run_stops
from engine.sampling.results import step_results
from engine.sampling.run_sampler import NoiseTables, Records, RunSampler
from engine.scheduler.requests.request_scheduler import ScheduledChunk, Scheduler, SchedulerOutput
from models.llama.step_batch import StepBatch

# The longest run while some running sequences wait for their turn to decode: long enough that the run's fixed
# costs (building its batch, the first readback) are shared by several steps, short enough that the sequences
# left out still get a token every few runs.
TAKING_TURNS_STEPS = 8

Sampled = dict[str, tuple[int, dict[int, float] | None]]
Failed = dict[str, str]
ApplyStep = Callable[[SchedulerOutput, Sampled, Failed, float], list[RequestOutput]]
OutputSink = Callable[[list[RequestOutput]], None]


def kernel_samples(states: list[RequestState]) -> bool:
    """Whether the kernel's own argmax serves every row (greedy, no logprobs, no penalties, no stop ids held back
    by min_tokens: that argmax sees every token): only ids come back."""
    return all(s.params.is_greedy and s.params.logprobs is None and not s.params.has_penalties
               and not s.params.holds_stops(s.seq.num_output_tokens) for s in states)


def states_sampler(states: Sequence[RequestState], steps: int, backend: Backend, noise: NoiseTables,
                   eos_ids: Sequence[int]) -> RunSampler:
    """A RunSampler of `steps` steps for these requests, from their current counts of generated tokens (their
    noise counters and min_tokens), on the backend's device with its sampling kernel."""
    return RunSampler([s.params for s in states], [s.noise_key for s in states], [s.history for s in states],
                      [s.seq.num_output_tokens for s in states], steps, noise, backend.device,
                      backend.sampling_kernel, eos_ids)


class DecodeRuns:
    """The engine's runs of decode steps. `apply` is the engine's bookkeeping of one step's sampled tokens and
    failures (scheduler, stop checks, outputs); `requests` its live requests (a finished one leaves it); `eos_ids`
    the model's EOS tokens (the host's EOS check's, for the device's stop rules)."""

    def __init__(self, backend: Backend, scheduler: Scheduler, requests: Mapping[str, RequestState],
                 apply: ApplyStep, max_steps: int, page_size: int, backend_name: str, noise: NoiseTables,
                 eos_ids: Sequence[int], arrivals: Callable[[], bool] = lambda: False) -> None:
        self.backend, self.scheduler, self.requests, self.apply = backend, scheduler, requests, apply
        self.max_steps, self.page_size, self.backend_name, self.noise = max_steps, page_size, backend_name, noise
        self.eos_ids = tuple(eos_ids)
        self.arrivals = arrivals  # requests on their way to the scheduler (LLMEngine.arrivals_waiting)
        self.last_run_steps = 0  # how many decode steps the last run took (it may end early)

    def steps_for(self, plan: SchedulerOutput) -> int:
        """How many decode steps `plan` runs back to back (1: an ordinary step). A plan that leaves running
        sequences out (more decode than a step's tokens: they take turns, Scheduler._decode_turn) runs at most
        TAKING_TURNS_STEPS, so the ones left out wait that long at most for their next token."""
        steps = self.max_steps
        if steps <= 1 or plan.preempted or self._seat_wanted():
            return 1
        if len(plan.chunks) < self.scheduler.num_running:
            steps = min(steps, TAKING_TURNS_STEPS)
        for chunk in plan.chunks:
            if not (chunk.is_decode and chunk.samples):
                return 1
            params, seq = self.requests[chunk.seq_id].params, chunk.seq
            steps = min(steps, params.max_tokens - seq.num_output_tokens,
                        self.scheduler.max_seq_len - seq.num_tokens + 1)
        return max(1, steps)

    def stops_for(self, chunks: Sequence[ScheduledChunk]) -> RunStops:
        """The stop rules of a run over `chunks` (decodes): the host's EOS, stop-id, min_tokens and length checks
        (LLMEngine._postprocess) from each sequence's count of tokens before the run."""
        params = [self.requests[c.seq_id].params for c in chunks]
        return run_stops(params, self.eos_ids, [c.seq.num_output_tokens for c in chunks],
                         [self.scheduler.max_seq_len - c.seq.num_tokens for c in chunks],
                         [p.min_tokens for p in params])

    def _seat_wanted(self) -> bool:
        """Whether a waiting request could be admitted if the run ended: someone waits (in the scheduler, or on its
        way there: self.arrivals) and a seat is free (with every seat taken, a waiting request cannot start before a
        running one finishes)."""
        free = self.scheduler.num_running < self.scheduler.config.max_num_seqs
        return free and (bool(self.scheduler.num_waiting) or self.arrivals())

    def run(self, plan: SchedulerOutput, tables: list[tuple[int, ...]], steps: int,
            sink: OutputSink | None) -> list[RequestOutput]:
        """Run up to `steps` decode steps of `plan` (block tables `tables` hold every position they write). Outputs
        go to `sink` chunk by chunk as the backend hands the tokens back, or are returned at the end without one."""
        chunks = plan.chunks
        states = [self.requests[c.seq_id] for c in chunks]
        params = [s.params for s in states]
        outputs: list[RequestOutput] = []
        self.last_run_steps = 0
        current = list(zip(range(len(chunks)), chunks))  # (row, chunk) of the sequences still running
        done = 0
        sampler: RunSampler | None = None

        def take(records: Records) -> bool:
            nonlocal current, done
            first = len(outputs)
            first_step = done
            for step in range(records["ids"].shape[0]):
                done += 1
                if not current:
                    break  # every sequence stopped: the later steps' ids are dropped
                result = step_results(records, step, params, sampler.failures if sampler is not None else None,
                                      first_step)
                step_plan = SchedulerOutput(chunks=tuple(c for _r, c in current), preempted=())
                sampled: Sampled = {}
                failed: Failed = {}
                for row, c in current:
                    tok, error = result.token_ids[row], result.errors[row]
                    if tok is None:
                        failed[c.seq_id] = error or "sampling produced no token"
                    else:
                        sampled[c.seq_id] = (tok, result.logprobs[row])
                outputs.extend(self.apply(step_plan, sampled, failed, time.monotonic()))
                # The next step's chunks: the sequences still running, their new token one position further.
                current = [(row, ScheduledChunk(c.seq, (sampled[c.seq_id][0],), c.start_pos + 1, tables[row], True))
                           for row, c in current if c.seq_id in self.requests and c.seq_id in sampled]
            if sink is not None and len(outputs) > first:
                sink(outputs[first:])
                del outputs[first:]
            return bool(current) and not self._seat_wanted()

        try:
            batch = StepBatch.build([list(c.token_ids) for c in chunks], [c.start_pos for c in chunks],
                                    [list(t) for t in tables], device=self.backend.batch_device,
                                    page_size=self.page_size)
            if not kernel_samples(states):
                sampler = states_sampler(states, steps, self.backend, self.noise, self.eos_ids)
            self.last_run_steps = self.backend.decode_steps(batch, steps, self.page_size, take, sampler,
                                                            stops=self.stops_for(chunks))
        except EngineFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - the whole run's forward: no single request to blame
            raise EngineFatalError(f"the {self.backend_name} backend's run of {steps} decode steps failed after "
                                   f"{done}: {type(exc).__name__}: {exc}") from exc
        return outputs
