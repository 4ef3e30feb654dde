"""LLMEngine: continuous batching over a paged KV cache. One `step()` = schedule → run → sample →
postprocess. Requests join and leave the running batch between steps."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from engine.backends import create_backend, resolve_backend
from engine.detokenizer import IncrementalDetokenizer, find_stop, visible_text
from engine.engine_config import EngineConfig, size_kv_cache
from engine.outputs import RequestMetrics, RequestOutput
from engine.request_state import RequestState
from engine.sampler import sample_batch
from engine.sampling_params import SamplingParams
from engine.scheduler.request_scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus
from models.llama.config import LlamaConfig
from models.llama.step_batch import StepBatch
from models.llama.tokenizer import apply_chat_template, load_tokenizer
from models.llama.weights import load_weights

PromptInput = str | list[int] | dict[str, Any]


@dataclass(frozen=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_pages_used: int
    kv_pages_total: int
    num_preemptions: int
    steps: int

    @property
    def kv_usage(self) -> float:
        return self.kv_pages_used / self.kv_pages_total if self.kv_pages_total else 0.0


class LLMEngine:
    def __init__(self, model: str, **kwargs: Any):
        self.engine_config = EngineConfig(model=model, **kwargs)
        cfg = self.engine_config
        self.config = LlamaConfig.from_dir(model)
        self.tokenizer = load_tokenizer(model)
        self.choice = resolve_backend(cfg.backend, cfg.device)
        if self.choice.name == "cuda" and cfg.dtype != "bfloat16":
            raise ValueError(f"the cuda megakernel runs bfloat16 weights; dtype {cfg.dtype!r} needs backend 'torch'")
        self.backend_name = self.choice.name
        weights_device = self.choice.device if self.choice.name != "vm" else torch.device("cpu")
        weights = load_weights(model, self.config, dtype=cfg.torch_dtype, device=weights_device,
                               progress=cfg.progress)
        # The cuda backend packs a second copy of the weights after the cache is sized: keep room for it.
        reserve = weights.num_bytes() if self.choice.name == "cuda" else 0
        self.num_pages, self.max_model_len = size_kv_cache(cfg, self.config, weights_device, reserve)
        options: dict[str, object] = {}
        if self.choice.name in ("vm", "cuda"):
            options["policy"] = cfg.policy
        self.backend = create_backend(self.choice, weights, self.num_pages, cfg.page_size, **options)
        budget = cfg.max_num_batched_tokens
        if self.backend.max_tokens_per_step is not None:
            budget = min(budget, self.backend.max_tokens_per_step)
        self.scheduler = Scheduler(SchedulerConfig(
            max_num_seqs=min(cfg.max_num_seqs, budget), max_num_batched_tokens=budget,
            max_model_len=self.max_model_len, num_pages=self.num_pages, page_size=cfg.page_size))
        self._requests: dict[str, RequestState] = {}
        self._rng = torch.Generator().manual_seed(cfg.seed)
        self._steps = 0
        self._preemptions = 0

    # ---------------------------------------------------------------- requests
    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        return apply_chat_template(self.tokenizer, messages)

    def _prompt_ids(self, prompt: PromptInput) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            return prompt, list(self.tokenizer.encode(prompt, add_special_tokens=True))
        if isinstance(prompt, dict):
            if "prompt_token_ids" not in prompt:
                raise ValueError("a dict prompt needs the key 'prompt_token_ids'")
            return prompt.get("prompt"), self._check_ids(prompt["prompt_token_ids"])
        if isinstance(prompt, (list, tuple)):
            return None, self._check_ids(prompt)
        raise ValueError(f"prompt must be a string, a list of token ids or a dict, got {type(prompt).__name__}")

    def _check_ids(self, ids: Any) -> list[int]:
        vocab = self.config.vocab_size
        out = []
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int) or not (0 <= t < vocab):
                raise ValueError(f"prompt token ids must be ints in [0, {vocab}), got {t!r}")
            out.append(int(t))
        return out

    def add_request(self, request_id: str, prompt: PromptInput, params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        text, ids = self._prompt_ids(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) + 1 > self.max_model_len:
            raise ValueError(
                f"the prompt has {len(ids)} tokens, but the model's context is {self.max_model_len} "
                f"tokens (max_model_len) and at least one token must be generated")
        now = time.monotonic() if arrival_time is None else arrival_time
        seq = Sequence(seq_id=request_id, prompt_token_ids=ids, arrival_time=now)
        self.scheduler.add(seq)  # raises ValueError if it can never fit the cache
        generator = torch.Generator()
        if params.seed is not None:
            generator.manual_seed(params.seed)
        else:
            generator.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._rng).item()))
        self._requests[request_id] = RequestState(
            seq=seq, params=params, prompt=text,
            detokenizer=IncrementalDetokenizer(self.tokenizer, ids, params.skip_special_tokens),
            generator=generator, metrics=RequestMetrics(arrival_time=now),
            logprobs=[] if params.logprobs is not None else None)

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
        return EngineStats(num_running=self.scheduler.num_running, num_waiting=self.scheduler.num_waiting,
                           kv_pages_used=bm.num_used_pages, kv_pages_total=self.num_pages,
                           num_preemptions=self._preemptions, steps=self._steps)

    # ---------------------------------------------------------------- the loop
    def step(self) -> list[RequestOutput]:
        plan = self.scheduler.schedule()
        self._preemptions += len(plan.preempted)
        outputs = [self._finish_by_scheduler(seq.seq_id) for seq in plan.finished
                   if seq.seq_id in self._requests]
        if plan.is_empty:
            return outputs
        self._steps += 1
        sampled = self._run(plan)
        self.scheduler.on_step_done(plan, {sid: tok for sid, (tok, _lp) in sampled.items()})
        now = time.monotonic()
        for seq_id, (token, logprob) in sampled.items():
            state = self._requests.get(seq_id)
            if state is not None:  # None: aborted while the step ran
                outputs.append(self._postprocess(state, token, logprob, now))
        return outputs

    def _finish_by_scheduler(self, seq_id: str) -> RequestOutput:
        """The scheduler ended a sequence that reached the context limit (it already freed the pages)."""
        state = self._requests.pop(seq_id)
        state.finish_reason = "length"
        state.metrics.finished_time = time.monotonic()
        return state.to_output(state.text)

    def _run(self, plan: SchedulerOutput) -> dict[str, tuple[int, dict[int, float] | None]]:
        chunks = plan.chunks
        batch = StepBatch.build([list(c.token_ids) for c in chunks], [c.start_pos for c in chunks],
                                [list(c.block_table) for c in chunks], device=self.backend.device,
                                page_size=self.engine_config.page_size)
        rows = [i for i, c in enumerate(chunks) if c.samples]
        states = [self._requests[chunks[i].seq.seq_id] for i in rows]
        if not rows:
            self.backend.forward(batch)
            return {}
        if all(s.params.is_greedy and s.params.logprobs is None for s in states):
            ids = self.backend.greedy(batch).tolist()
            return {chunks[i].seq.seq_id: (int(ids[i]), None) for i in rows}
        logits = self.backend.forward(batch)[rows]
        result = sample_batch(logits, [s.params for s in states], [s.generator for s in states])
        return {s.seq.seq_id: (tok, lp) for s, tok, lp in zip(states, result.token_ids, result.logprobs)}

    def _postprocess(self, state: RequestState, token: int, logprob: dict[int, float] | None,
                     now: float) -> RequestOutput:
        seq, params = state.seq, state.params
        if state.metrics.first_token_time is None:
            state.metrics.first_token_time = now
        state.metrics.last_token_time = now
        if state.logprobs is not None and logprob is not None:
            state.logprobs.append(logprob)
        delta = state.detokenizer.add(token)
        state.text += delta
        if not params.ignore_eos and token in self.config.eos_token_ids:
            state.finish_reason = "stop"
        elif token in params.stop_token_ids:
            state.finish_reason, state.stop_reason = "stop", token
        else:
            hit = find_stop(state.text, len(delta), params.stop)
            if hit is not None:
                state.text = state.text[: hit[0]]
                state.finish_reason, state.stop_reason = "stop", hit[1]
            elif seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.scheduler.max_seq_len:
                state.finish_reason = "length"
        if state.finish_reason is not None:
            if not isinstance(state.stop_reason, str):  # a stop string already cut the text
                state.text += state.detokenizer.flush()
            status = (SequenceStatus.FINISHED_STOPPED if state.finish_reason == "stop"
                      else SequenceStatus.FINISHED_LENGTH)
            self.scheduler.finish(seq.seq_id, status)
            state.metrics.finished_time = now
            del self._requests[seq.seq_id]
        return state.to_output(visible_text(state.text, params.stop, state.finish_reason is not None))
