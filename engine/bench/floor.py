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
from models.llama.tensor_parallel import shard_config


def weight_params_read_per_token(config: LlamaConfig, tp_world: int = 1) -> int:
    """Parameters a decode step reads; of one of `tp_world` tensor-parallel ranks: its share of the layers
    (shard_config) and of the LM head's rows (a greedy step of a rank computes only those: TP_ARGMAX)."""
    lm_head = -(-config.vocab_size // tp_world) * config.hidden_size  # tied or not, the full matrix is read once
    if tp_world > 1:
        config = shard_config(config, tp_world)
    h, i = config.hidden_size, config.intermediate_size
    per_layer = (
        2 * h * config.q_size  # q_proj, o_proj
        + 2 * h * config.kv_size  # k_proj, v_proj
        + 3 * h * i  # gate, up, down
        + 2 * h  # input / post-attention RMSNorm weights
    )
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
                 fp8_weights: bool = False, tp_world: int = 1) -> Floor:
    """The floor of one decode step of `batch` sequences of `prompt_len` tokens (or of sequences of `prompt_lens`):
    the weights once, every sequence's KV (its `seconds_per_token` is then per step); with `tp_world` > 1, one
    tensor-parallel rank's (its share of the weights and of the KV heads; bf16 weights)."""
    if bandwidth_gbps <= 0:
        raise ValueError(f"decode_floor: bandwidth_gbps must be > 0, got {bandwidth_gbps}")
    weight = (fp8_weight_bytes_read_per_token(config, dtype_bytes) if fp8_weights
              else weight_params_read_per_token(config, tp_world) * dtype_bytes)
    if tp_world > 1:
        config = shard_config(config, tp_world)  # its KV heads
    contexts = sum(mean_decode_context(p, new_tokens) for p in (prompt_lens or (prompt_len,) * batch))
    kv = kv_bytes_per_context_token(config, dtype_bytes) * contexts
    return Floor(weight_bytes=weight, kv_bytes=kv, bandwidth_gbps=bandwidth_gbps)
