"""Per-request sampling settings, vLLM-shaped, validated on construction."""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token and when to stop.

    temperature 0 means greedy. top_k <= 0 and top_p == 1 disable those filters. `logprobs=k`
    returns, per generated token, the chosen token's log-probability plus the top k.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    stop: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int | None = None
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        # Accept lists / a single string for convenience, store tuples (frozen + hashable).
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif self.stop is None:
            object.__setattr__(self, "stop", ())
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if self.stop_token_ids is None:
            object.__setattr__(self, "stop_token_ids", ())
        else:
            object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        self._validate()

    def _validate(self) -> None:
        if self.n != 1:
            raise ValueError(f"n must be 1 in the engine (got {self.n}); the server fans out n > 1")
        if not (self.temperature >= 0.0):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(f"top_k must be an int >= -1 (0 or -1 disables it), got {self.top_k}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens}")
        if any((not isinstance(s, str)) or s == "" for s in self.stop):
            raise ValueError("stop must be non-empty strings")
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError("stop_token_ids must be non-negative token ids")
        if self.logprobs is not None and not (0 <= self.logprobs <= MAX_LOGPROBS):
            raise ValueError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {self.seed!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0
