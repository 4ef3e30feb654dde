"""Per-request sampling settings, vLLM-shaped, validated on construction.

Every value accepted here samples without NaN/inf (engine/sampling/filters.py relies on these bounds); every
rejection is a `RequestError` whose message starts with the field's name.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from engine.errors import RequestError

MAX_LOGPROBS = 20
# Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS): the distribution is a spike anyway.
GREEDY_TEMPERATURE = 1e-5
# Temperatures in [GREEDY_TEMPERATURE, MIN_TEMPERATURE) are raised to MIN_TEMPERATURE (vLLM's _MAX_TEMP):
# logits / temperature below this overflows float32 for ordinary logit magnitudes (|logit| * 1e2 is
# safe up to ~3e36, while 1e-39 is a float32 denormal and 1e-45 rounds to 0).
MIN_TEMPERATURE = 1e-2
# top_p below this keeps only the most likely token: the float32 probabilities cannot resolve a
# smaller mass (1e-46 even rounds to 0, which would drop every token).
TOP_P_FLOOR = 1e-6
# torch.Generator.manual_seed takes exactly this range (a signed or unsigned 64-bit integer).
SEED_MIN, SEED_END = -(2**63), 2**64
PENALTY_RANGE = (-2.0, 2.0)  # OpenAI's presence/frequency penalty range


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token and when to stop.

    temperature < GREEDY_TEMPERATURE means greedy. top_k <= 0, top_p == 1 and min_p == 0 disable those
    filters. presence/frequency penalties act on generated tokens (OpenAI), repetition_penalty on prompt
    and generated tokens (HF/vLLM; 1 = off). `logprobs=k` returns, per generated token, the chosen
    token's raw log-probability plus the top k; `prompt_logprobs=k` the same for every prompt token after the first
    (the prompt is then computed one token per step). `include_stop_str_in_output` keeps a matched stop string
    at the end of the text. `min_tokens` (vLLM's): until a request has that many tokens, its EOS ids (even with
    ignore_eos) and stop_token_ids cannot be sampled and no stop id or stop string ends it (engine/sampling/
    min_tokens.py).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    stop: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        # Accept lists / a single string for convenience, store tuples (frozen + hashable).
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        object.__setattr__(self, "stop_token_ids", _token_ids(self.stop_token_ids))
        for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                     "repetition_penalty"):
            object.__setattr__(self, name, _real(name, getattr(self, name)))
        for name in ("n", "top_k", "max_tokens", "min_tokens"):
            object.__setattr__(self, name, _integer(name, getattr(self, name)))
        for name in ("seed", "logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _integer(name, getattr(self, name)))
        for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            if not isinstance(getattr(self, name), bool):
                raise RequestError(f"{name} must be a bool, got {getattr(self, name)!r}")
        self._validate()

    def _validate(self) -> None:
        if self.n != 1:
            raise RequestError(f"n must be 1 in the engine (got {self.n}); the server fans out n > 1")
        if self.temperature < 0.0:
            raise RequestError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise RequestError(f"top_k must be an int >= -1 (0 or -1 disables it), got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise RequestError(f"min_p must be in [0, 1], got {self.min_p}")
        lo, hi = PENALTY_RANGE
        for name in ("presence_penalty", "frequency_penalty"):
            if not lo <= getattr(self, name) <= hi:
                raise RequestError(f"{name} must be in [{lo:g}, {hi:g}], got {getattr(self, name)}")
        if self.repetition_penalty <= 0.0:
            raise RequestError(f"repetition_penalty must be > 0 (1 disables it), got {self.repetition_penalty}")
        if self.max_tokens < 1:
            raise RequestError(f"max_tokens must be an int >= 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise RequestError(f"min_tokens must be an int >= 0, got {self.min_tokens}")
        if self.min_tokens > self.max_tokens:
            raise RequestError(f"min_tokens must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise RequestError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        if self.prompt_logprobs is not None and not 0 <= self.prompt_logprobs <= MAX_LOGPROBS:
            raise RequestError(f"prompt_logprobs must be in [0, {MAX_LOGPROBS}], got {self.prompt_logprobs}")
        if self.seed is not None and not SEED_MIN <= self.seed < SEED_END:
            raise RequestError(f"seed must be an int in [-2**63, 2**64), got {self.seed}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def effective_temperature(self) -> float:
        """The temperature the sampler divides by (only meaningful when not greedy)."""
        return max(self.temperature, MIN_TEMPERATURE)

    def holds_stops(self, generated: int) -> bool:
        """Whether a request with `generated` tokens is still below min_tokens: its next token cannot be a stop id."""
        return generated < self.min_tokens

    @property
    def has_penalties(self) -> bool:
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)


def _real(name: str, value: Any) -> float:
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            number = float(value)  # an int beyond float's range overflows here
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number
    raise RequestError(f"{name} must be a finite number, got {value!r}")


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise RequestError(f"{name} must be an int, got {value!r}")
    return int(value)


def _stop_strings(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, (list, tuple)) or any(not isinstance(s, str) or s == "" for s in items):
        raise RequestError(f"stop must be a non-empty string or a list of them, got {stop!r}")
    return tuple(items)


def _token_ids(ids: Any) -> tuple[int, ...]:
    if ids is None:
        return ()
    if not isinstance(ids, (list, tuple)) or any(
            isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0 for t in ids):
        raise RequestError(f"stop_token_ids must be a list of non-negative token ids, got {ids!r}")
    return tuple(int(t) for t in ids)
