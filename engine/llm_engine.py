"""LLMEngine: continuous batching over a paged KV cache. One `step()` = schedule → run → sample →
postprocess. Requests join and leave the running batch between steps. Where the host has nothing to do
between two tokens (decodes, no seat wanted), one step runs several decode steps on the device
(engine/decode_runs.py); a request with prompt_logprobs has its prompt scored one token per step
(engine/prompt_scoring.py). With `async_scheduling` the next step is scheduled and launched while the current one
runs, and the current one is postprocessed behind it (engine/lookahead.py).

Request isolation is a design rule here: one bad request never breaks the engine.
- Everything that can fail for one request (request id, prompt checks and tokenisation, sampling
  parameters, seeding, stop-handling setup) runs in `add_request` BEFORE the request touches shared
  engine state. The scheduler registration is the last step that can fail and it is atomic; the entry
  in `_requests` follows and cannot fail. A rejected request raises `RequestError` and leaves nothing.
- In `step()`, a failure that belongs to one request (a non-finite logits row, its sampling row, its
  postprocess: detokenize, stop checks) finishes that request alone with finish_reason "error" and
  `RequestOutput.error`; its KV pages are freed and the other requests go on.
- A failure of the whole step (scheduling, building the batch, the backend's forward) cannot be traced
  to one request: `step()` raises `EngineFatalError` naming the step and the cause.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.decode_runs import DecodeRuns, Failed, Sampled, kernel_samples
from engine.detokenizer import OutputText
from engine.engine_config import EngineConfig
from engine.engine_setup import set_up_engine
from engine.errors import EngineFatalError, RequestError
from engine.lookahead import LookAhead, StepHooks
from engine.outputs import RequestMetrics, RequestOutput
from engine.prompt_input import PromptInput, prompt_token_ids
from engine.request_state import RequestState
from engine.sampling.noise import seed_key
from engine.prompt_scoring import record_prompt_logprobs, scores_prompt
from engine.sampling.results import sample_batch
from engine.sampling.run_sampler import NoiseTables
from engine.sampling_params import SEED_END, SEED_MIN, SamplingParams
from engine.scheduler.requests.request_scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus
from engine.step_times import StepClock, StepTimes
from models.llama.step_batch import StepBatch
from models.llama.tokenizer import apply_chat_template



@dataclass(frozen=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_pages_used: int
    kv_pages_total: int
    num_preemptions: int
    steps: int
    # The backend's compiled-stream cache since the engine started: steps whose shape was compiled already, shapes
    # compiled on the engine's thread (each a pause of every request), the seconds those compiles took, steps run
    # padded in a larger shape's stream while theirs is not compiled (engine/cuda/stream_hosting.py), and shapes
    # compiled off the engine thread meanwhile (engine/cuda/background_builds.py).
    stream_hits: int = 0
    stream_compiles: int = 0
    stream_compile_seconds: float = 0.0
    stream_hosted: int = 0
    stream_background_compiles: int = 0
    # The runs of decode steps on the device (engine/run_times.py): their device seconds, and the seconds
    # of those the device waited for the host to launch the next chunk of steps.
    decode_run_seconds: float = 0.0
    decode_run_idle_seconds: float = 0.0
    # The host's wall seconds per kind of engine step (engine/step_times.py); None from engines that keep none.
    step_times: StepTimes | None = None

    @property
    def kv_usage(self) -> float:
        return self.kv_pages_used / self.kv_pages_total if self.kv_pages_total else 0.0


class LLMEngine:
    def __init__(self, model: str, **kwargs: Any):
        self.engine_config = EngineConfig(model=model, **kwargs)
        cfg = self.engine_config
        setup = set_up_engine(cfg)  # checks, weights, the KV cache's size and the backend (engine/engine_setup.py)
        self.model_dir, self.config, self.tokenizer = setup.model_dir, setup.config, setup.tokenizer
        self.choice, self.backend_name, self.backend = setup.choice, setup.choice.name, setup.backend
        self.num_pages, self.max_model_len = setup.num_pages, setup.max_model_len
        budget = cfg.max_num_batched_tokens
        if self.backend.max_tokens_per_step is not None:
            budget = min(budget, self.backend.max_tokens_per_step)
        budget = self.backend.step_token_budget(budget, cfg.max_num_seqs)
        # max_num_seqs is not capped by the step's tokens: more decoding sequences than a step holds take turns
        # (Scheduler._decode_turn), so every request is admitted and starts, instead of waiting for a whole
        # earlier group to finish.
        self.scheduler = Scheduler(SchedulerConfig(
            max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=budget,
            max_model_len=self.max_model_len, num_pages=self.num_pages, page_size=cfg.page_size))
        self._requests: dict[str, RequestState] = {}
        # Where outputs of a run of decode steps go as soon as each chunk of its tokens is processed (the server
        # streams them); None: step() returns them all at the end of the run.
        self.output_sink: Callable[[list[RequestOutput]], None] | None = None
        # Whether requests are on their way to add_request (a server's queue the engine thread drains between steps):
        # a run of decode steps then ends early, as for a waiting request, if a seat is free, so a new prompt waits a
        # few steps for its first token instead of the whole run. None: nobody adds requests during a step.
        self.arrivals_waiting: Callable[[], bool] | None = None
        self._noise = NoiseTables(self.config.vocab_size)
        self._runs = DecodeRuns(self.backend, self.scheduler, self._requests, self._apply, cfg.decode_steps,
                                cfg.page_size, self.backend_name, self._noise, self.config.eos_token_ids,
                                arrivals=lambda: self.arrivals_waiting is not None and self.arrivals_waiting())
        self._ahead = LookAhead(self.backend, self.scheduler, self._requests, self._runs, self._noise, cfg.page_size,
                                self.backend_name, StepHooks(self._schedule, self._finish_at_length, self._run_plan,
                                                             self._guarded_postprocess, self._fail, self._count_step,
                                                             lambda: self.output_sink)
                                ) if cfg.async_scheduling else None
        self._rng = torch.Generator().manual_seed(cfg.seed)
        self._steps = 0
        self._preemptions = 0
        self._clock = StepClock()

    # ---------------------------------------------------------------- requests
    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        return apply_chat_template(self.tokenizer, messages)

    def add_request(self, request_id: str, prompt: PromptInput, params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        """Queue a request. Raises `RequestError` (and changes nothing) if anything about it is wrong."""
        if not isinstance(request_id, str) or not request_id:
            raise RequestError(f"request_id must be a non-empty string, got {request_id!r}")
        if request_id in self._requests:
            raise RequestError(f"request_id {request_id!r} is already in use")
        if not isinstance(params, SamplingParams):
            raise RequestError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        if params.seed is not None and not SEED_MIN <= params.seed < SEED_END:  # a mutated params object
            raise RequestError(f"seed must be an int in [-2**63, 2**64), got {params.seed}")
        text, ids = prompt_token_ids(prompt, self.tokenizer, self.config.vocab_size)
        if not ids:
            raise RequestError("prompt is empty")
        if len(ids) + 1 > self.max_model_len:
            raise RequestError(
                f"prompt has {len(ids)} tokens, but the model's context is {self.max_model_len} "
                f"tokens (max_model_len) and at least one token must be generated")
        now = time.monotonic() if arrival_time is None else arrival_time
        scored = params.prompt_logprobs is not None
        seq = Sequence(seq_id=request_id, prompt_token_ids=ids, arrival_time=now, max_chunk=1 if scored else None)
        state = RequestState(
            seq=seq, params=params, prompt=text, output_text=OutputText(self.tokenizer, ids, params),
            noise_key=seed_key(params.seed) if params.seed is not None else 0, metrics=RequestMetrics(arrival_time=now),
            logprobs=[] if params.logprobs is not None else None, prompt_logprobs=[None] if scored else None)
        try:
            self.scheduler.add(seq)  # atomic: it checks everything before it registers the sequence
        except ValueError as exc:
            raise RequestError(f"prompt cannot be scheduled: {exc}") from exc
        if params.seed is None:  # drawn only for admitted requests, so rejected ones do not shift the stream
            state.noise_key = int(torch.randint(0, 2**62, (1,), generator=self._rng).item())
        self._requests[request_id] = state

    def close(self) -> None:
        """Release the backend's workers (a tensor-parallel engine's processes); the engine runs no step after it."""
        self.backend.close()

    def abort(self, request_id: str) -> bool:
        state = self._requests.pop(request_id, None)
        if state is None:
            return False
        self.scheduler.abort(request_id)
        state.finish_reason = "abort"
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    def get_stats(self) -> EngineStats:
        bm = self.scheduler.block_manager
        streams = self.backend.stream_stats()
        runs = self.backend.run_times()
        return EngineStats(num_running=self.scheduler.num_running, num_waiting=self.scheduler.num_waiting,
                           kv_pages_used=bm.num_used_pages, kv_pages_total=self.num_pages,
                           num_preemptions=self._preemptions, steps=self._steps, stream_hits=streams.hits,
                           stream_compiles=streams.misses, stream_compile_seconds=streams.build_seconds,
                           stream_hosted=streams.hosted, stream_background_compiles=streams.background,
                           decode_run_seconds=runs.device_seconds, decode_run_idle_seconds=runs.idle_seconds,
                           step_times=self._clock.totals())

    def reset_counters(self) -> None:
        """Steps and preemptions back to zero (after engine/warm_up.py's throwaway requests)."""
        self._steps = 0
        self._preemptions = 0

    # ---------------------------------------------------------------- the loop
    def step(self) -> list[RequestOutput]:
        """One engine step. Raises only `EngineFatalError`; a single request's failure is an output."""
        try:
            return self._step()
        except EngineFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - engine bookkeeping itself failed
            raise EngineFatalError(f"engine step {self._steps} failed: {type(exc).__name__}: {exc}") from exc

    def _step(self) -> list[RequestOutput]:
        if self._ahead is not None:  # one step of look-ahead (engine/lookahead.py)
            return self._ahead.step()
        plan = self._schedule()
        outputs = self._finish_at_length(plan, time.monotonic())
        if plan.is_empty:
            return outputs
        return outputs + self._run_plan(plan)

    def _schedule(self) -> SchedulerOutput:
        plan = self.scheduler.schedule()
        self._preemptions += len(plan.preempted)
        return plan

    def _finish_at_length(self, plan: SchedulerOutput, now: float) -> list[RequestOutput]:
        """The final outputs of the sequences the scheduler retired at their length limit."""
        return [self._guarded_finish(self._requests[seq.seq_id], "length", None, now)
                for seq in plan.finished if seq.seq_id in self._requests and self._requests[seq.seq_id].seq is seq]

    def _count_step(self) -> None:
        self._steps += 1

    def _run_plan(self, plan: SchedulerOutput) -> list[RequestOutput]:
        """Run a scheduled plan: a run of decode steps where it may be one, else one step."""
        self._steps += 1
        self._clock.step_begins()
        steps, tables = self._runs.steps_for(plan), None
        while steps > 1:  # a cache too full for the whole run still gets a shorter one
            tables = self.scheduler.reserve_decode_steps(plan, steps)
            if tables is not None:
                break
            steps //= 2
        if tables is not None:
            try:
                return self._runs.run(plan, tables, steps, self.output_sink)
            finally:
                self._steps += max(0, self._runs.last_run_steps - 1)
                self._clock.step_ends("run", self._runs.last_run_steps * len(plan.chunks), bool(self._requests))
        sampled, failed = self._run(plan)
        outputs = self._apply(plan, sampled, failed, time.monotonic())
        prompt = sum(len(c.token_ids) for c in plan.chunks if not c.is_decode)
        self._clock.step_ends("prefill" if prompt else "decode", prompt or len(sampled), bool(self._requests))
        return outputs

    def _apply(self, plan: SchedulerOutput, sampled: Sampled, failed: Failed, now: float) -> list[RequestOutput]:
        """Finish the step's failed requests, record its sampled tokens with the scheduler, then stop checks and
        outputs per request."""
        outputs = [self._fail(self._requests[seq_id], message, now)  # freed before on_step_done, which skips them
                   for seq_id, message in failed.items() if seq_id in self._requests]
        self.scheduler.on_step_done(plan, {sid: tok for sid, (tok, _lp) in sampled.items()})
        for seq_id, (token, logprob) in sampled.items():
            state = self._requests.get(seq_id)
            if state is None:  # aborted while the step ran
                continue
            outputs.append(self._guarded_postprocess(state, token, logprob, now))
        return outputs

    def _guarded_postprocess(self, state: RequestState, token: int, logprob: dict[int, float] | None,
                             now: float) -> RequestOutput:
        """_postprocess, where a failure finishes this request alone (finish_reason "error")."""
        try:
            return self._postprocess(state, token, logprob, now)
        except Exception as exc:  # noqa: BLE001 - this request's own failure
            return self._fail(state, f"postprocessing failed: {type(exc).__name__}: {exc}", now)

    def _run(self, plan: SchedulerOutput) -> tuple[Sampled, dict[str, str]]:
        """Forward the step and sample. Returns (seq_id -> (token, logprobs), seq_id -> error message)."""
        chunks = plan.chunks
        rows = [i for i, c in enumerate(chunks) if c.samples]
        states = [self._requests[chunks[i].seq.seq_id] for i in rows]
        scored = [i for i, c in enumerate(chunks) if scores_prompt(self._requests[c.seq_id], c)]
        try:
            batch = StepBatch.build([list(c.token_ids) for c in chunks], [c.start_pos for c in chunks],
                                    [list(c.block_table) for c in chunks], device=self.backend.batch_device,
                                    page_size=self.engine_config.page_size)
            if not rows and not scored:
                self.backend.forward(batch)
                return {}, {}
            if not scored and kernel_samples(states):  # the backend's argmax (in-kernel on cuda): only ids come back
                ids = self.backend.greedy(batch).tolist()
                return {chunks[i].seq.seq_id: (int(ids[i]), None) for i in rows}, {}
            all_logits = self.backend.forward(batch)
            logits = all_logits[rows]
        except Exception as exc:  # noqa: BLE001 - the whole step's forward: no single request to blame
            raise EngineFatalError(f"engine step {self._steps} failed in the {self.backend_name} backend's "
                                   f"forward: {type(exc).__name__}: {exc}") from exc
        failed: dict[str, str] = {}
        if scored:
            failed.update(record_prompt_logprobs(self._requests, [chunks[i] for i in scored], all_logits[scored]))
        if not rows:
            return {}, failed
        # On the logits' device (the GPU for cuda): only ids and requested logprobs cross to the host.
        result = sample_batch(logits, [s.params for s in states], [s.noise_key for s in states],
                              [s.history for s in states], [s.seq.num_output_tokens for s in states], self._noise,
                              self.backend.sampling_kernel, self.config.eos_token_ids)
        sampled: Sampled = {}
        for s, tok, lp, error in zip(states, result.token_ids, result.logprobs, result.errors):
            if error is not None or tok is None:
                failed[s.seq.seq_id] = error or "sampling produced no token"
            else:
                sampled[s.seq.seq_id] = (tok, lp)
        return sampled, failed

    def _postprocess(self, state: RequestState, token: int, logprob: dict[int, float] | None,
                     now: float) -> RequestOutput:
        seq, params = state.seq, state.params
        if state.metrics.first_token_time is None:
            state.metrics.first_token_time = now
        state.metrics.last_token_time = now
        if state.logprobs is not None and logprob is not None:
            state.logprobs.append(logprob)
        stop_string = state.output_text.add(token)
        if stop_string is not None:
            return self._finish(state, "stop", stop_string, now)
        # Below min_tokens no stop id ends a request (the sampler also keeps them from being drawn): vLLM's
        # check_stop, counting the new token, as the device's run rules (engine/run_stops.py) do.
        held = params.holds_stops(seq.num_output_tokens)
        if not held and not params.ignore_eos and token in self.config.eos_token_ids:
            return self._finish(state, "stop", None, now)
        if not held and token in params.stop_token_ids:
            return self._finish(state, "stop", token, now)
        if seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.scheduler.max_seq_len:
            return self._finish(state, "length", None, now)
        return state.to_output(state.output_text.visible())

    def _finish(self, state: RequestState, reason: str, stop_reason: str | int | None,
                now: float) -> RequestOutput:
        """End a request normally; the held-back text is flushed and may still complete a stop string."""
        late_stop = state.output_text.finish()
        if late_stop is not None:
            reason, stop_reason = "stop", late_stop
        seq_id = state.seq.seq_id
        if self.scheduler.get(seq_id) is state.seq:  # else the scheduler already retired it
            status = SequenceStatus.FINISHED_STOPPED if reason == "stop" else SequenceStatus.FINISHED_LENGTH
            self.scheduler.finish(seq_id, status)
        self._requests.pop(seq_id, None)
        state.finish_reason, state.stop_reason = reason, stop_reason
        state.metrics.finished_time = now
        return state.to_output(state.output_text.visible())

    def _guarded_finish(self, state: RequestState, reason: str, stop_reason: str | int | None,
                        now: float) -> RequestOutput:
        try:
            return self._finish(state, reason, stop_reason, now)
        except Exception as exc:  # noqa: BLE001 - this request's own failure
            return self._fail(state, f"finishing failed: {type(exc).__name__}: {exc}", now)

    def _fail(self, state: RequestState, message: str, now: float) -> RequestOutput:
        """Finish one request with finish_reason "error", free its pages, keep the text already shown."""
        seq_id = state.seq.seq_id
        self.scheduler.abort(seq_id)  # False when it already left the scheduler
        self._requests.pop(seq_id, None)
        state.finish_reason, state.stop_reason = "error", None
        state.error = " ".join(message.split())  # one line, whatever the exception text held
        state.metrics.finished_time = now
        return state.to_output(state.shown)
