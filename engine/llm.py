"""The offline API: `LLM(model=DIR).generate(prompts, SamplingParams(...))`, vLLM-shaped."""
from __future__ import annotations

import itertools
from typing import Any, Sequence

from engine.errors import RequestError
from engine.llm_engine import LLMEngine, PromptInput
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams

Message = dict[str, Any]


class LLM:
    def __init__(self, model: str, backend: str = "auto", dtype: str = "bfloat16", **engine_kwargs: Any):
        self.engine = LLMEngine(model, backend=backend, dtype=dtype, **engine_kwargs)
        self._ids = itertools.count()

    def close(self) -> None:
        """End what the engine started besides this process (tensor-parallel workers); the LLM is unusable after."""
        self.engine.close()

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(self, prompts: PromptInput | Sequence[PromptInput],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        prompt_list = _as_prompt_list(prompts)
        params_list = _broadcast_params(sampling_params, len(prompt_list))
        order: list[str] = []
        try:
            for prompt, params in zip(prompt_list, params_list):
                request_id = f"offline-{next(self._ids)}"
                self.engine.add_request(request_id, prompt, params)
                order.append(request_id)
            return self._run(order, use_tqdm)
        except BaseException:
            # Whatever stopped this call (a RequestError, an EngineFatalError, Ctrl-C), none of its
            # requests stays queued to haunt the next call.
            for request_id in order:
                self.engine.abort(request_id)
            raise

    def chat(self, messages: list[Message] | list[list[Message]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool = False) -> list[RequestOutput]:
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [{"prompt_token_ids": self.engine.apply_chat_template(list(c))} for c in conversations]
        return self.generate(prompts, sampling_params, use_tqdm)

    def _run(self, order: list[str], use_tqdm: bool) -> list[RequestOutput]:
        finished: dict[str, RequestOutput] = {}
        bar = None
        if use_tqdm:
            from tqdm import tqdm
            bar = tqdm(total=len(order), desc="generate")
        while len(finished) < len(order):
            for out in self.engine.step():
                if out.finished:
                    finished[out.request_id] = out
                    if bar is not None:
                        bar.update(1)
            if not self.engine.has_unfinished_requests() and len(finished) < len(order):
                raise RuntimeError("engine went idle before every request finished")
        if bar is not None:
            bar.close()
        return [finished[r] for r in order]


def _as_prompt_list(prompts: Any) -> list[PromptInput]:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(t, int) for t in prompts):
        return [list(prompts)]  # a single token-id prompt
    return list(prompts)


def _broadcast_params(params: Any, n: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * n
    if isinstance(params, SamplingParams):
        return [params] * n
    params = list(params)
    if len(params) != n:
        raise RequestError(f"sampling_params: got {len(params)} for {n} prompts")
    return params
