"""The memory floor of batch-1 decode: bytes that must be read per token / copy bandwidth.

Weights: every parameter is streamed once per token except the input embedding, of which only one
row is read (negligible, not counted). The LM head matrix is read once in full, and when it is tied
to the embedding that same matrix is counted once. This reproduces the peers' figures
(/work/shared/reference/peers.md §2): Llama-3.2-1B = 1,235,814,400 params = 2,471,628,800 B in bf16.
KV: every context token's K and V rows of every layer are read once per decode step.
"""
from __future__ import annotations

from dataclasses import dataclass

from models.llama.config import LlamaConfig


def weight_params_read_per_token(config: LlamaConfig) -> int:
    h, i = config.hidden_size, config.intermediate_size
    per_layer = (
        2 * h * config.q_size  # q_proj, o_proj
        + 2 * h * config.kv_size  # k_proj, v_proj
        + 3 * h * i  # gate, up, down
        + 2 * h  # input / post-attention RMSNorm weights
    )
    lm_head = config.vocab_size * h  # tied or not, the full matrix is read once for the logits
    return config.num_hidden_layers * per_layer + h + lm_head  # + final norm


def fp8_weight_bytes_read_per_token(config: LlamaConfig, dtype_bytes: int) -> int:
    """Bytes a step of fp8 matrices reads (--quantization fp8): a byte per matrix element and a float32 scale per
    output row; the norms stay in `dtype_bytes` (the embedding's one row per token is not counted, as above)."""
    h, i = config.hidden_size, config.intermediate_size
    rows = config.num_hidden_layers * (config.q_size + 2 * config.kv_size + h + 2 * i + h) + config.vocab_size
    norms = (2 * config.num_hidden_layers + 1) * h
    return (weight_params_read_per_token(config) - norms) + 4 * rows + norms * dtype_bytes


def kv_bytes_per_context_token(config: LlamaConfig, dtype_bytes: int) -> int:
    return 2 * config.num_hidden_layers * config.kv_size * dtype_bytes


def mean_decode_context(prompt_len: int, new_tokens: int) -> float:
    """Mean number of cached tokens attended over by the timed decode steps.

    Protocol (see baselines.py): the first prompt_len - 1 tokens are prefilled, then decode step
    j = 0..new_tokens-1 feeds the token at position prompt_len - 1 + j and attends over
    prompt_len + j tokens.
    """
    return prompt_len + (new_tokens - 1) / 2.0


@dataclass(frozen=True)
class Floor:
    weight_bytes: int
    kv_bytes: float  # at the mean decode context
    bandwidth_gbps: float

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def seconds_per_token(self) -> float:
        return self.bytes_per_token / (self.bandwidth_gbps * 1e9)

    def to_dict(self) -> dict[str, float]:
        return {"weight_bytes": self.weight_bytes, "kv_bytes": self.kv_bytes,
                "bytes_per_token": self.bytes_per_token, "bandwidth_gbps": self.bandwidth_gbps,
                "ms_per_token": self.seconds_per_token * 1e3}


def decode_floor(config: LlamaConfig, dtype_bytes: int, prompt_len: int, new_tokens: int,
                 bandwidth_gbps: float, batch: int = 1, prompt_lens: tuple[int, ...] = (),
                 fp8_weights: bool = False) -> Floor:
    """The floor of one decode step of `batch` sequences of `prompt_len` tokens (or of sequences of `prompt_lens`):
    the weights once, every sequence's KV (its `seconds_per_token` is then per step)."""
    if bandwidth_gbps <= 0:
        raise ValueError(f"decode_floor: bandwidth_gbps must be > 0, got {bandwidth_gbps}")
    weight = (fp8_weight_bytes_read_per_token(config, dtype_bytes) if fp8_weights
              else weight_params_read_per_token(config) * dtype_bytes)
    contexts = sum(mean_decode_context(p, new_tokens) for p in (prompt_lens or (prompt_len,) * batch))
    kv = kv_bytes_per_context_token(config, dtype_bytes) * contexts
    return Floor(weight_bytes=weight, kv_bytes=kv, bandwidth_gbps=bandwidth_gbps)
