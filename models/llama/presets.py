"""Named Llama configurations: the real Llama 3.x shapes (1B to 70B), SmolLM2-135M's, plus a "tiny" one for fast tests.

The special-token ids follow the Llama 3 layout (a block of special tokens at the top of the
vocabulary, see `tokenizer_builder.special_token_ids`), so random checkpoints written by
`init_random` get a tokenizer whose ids agree with these configs.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from models.llama.config import ConfigError, LlamaConfig, RopeScaling

_LLAMA3_EOS = (128001, 128008, 128009)  # <|end_of_text|>, <|eom_id|>, <|eot_id|>
# The same layout in a 49152-token vocabulary (tokenizer_builder.special_token_ids)
BOS_49152, EOS_49152 = 48896, (48897, 48904, 48905)


def _llama3_rope(factor: float) -> RopeScaling:
    return RopeScaling("llama3", factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=8192)


PRESETS: Mapping[str, LlamaConfig] = MappingProxyType({
    # Small enough for CPU tests, but with GPU-friendly dims (head_dim 64, GQA 2) and llama3 RoPE
    # scaling whose original context (512) puts frequencies in all three llama3 regimes.
    "tiny": LlamaConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, rope_theta=500000.0,
        rope_scaling=RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=512),
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1008,
        eos_token_ids=(1009, 1016, 1017), max_position_embeddings=2048,
    ),
    "llama-3.2-1b": LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, rope_theta=500000.0,
        rope_scaling=_llama3_rope(32.0), rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=128000, eos_token_ids=_LLAMA3_EOS, max_position_embeddings=131072,
    ),
    "llama-3.2-3b": LlamaConfig(
        vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
        num_attention_heads=24, num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
        rope_scaling=_llama3_rope(32.0), rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=128000, eos_token_ids=_LLAMA3_EOS, max_position_embeddings=131072,
    ),
    "llama-3.1-8b": LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
        rope_scaling=_llama3_rope(8.0), rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_ids=_LLAMA3_EOS, max_position_embeddings=131072,
    ),
    # Llama-3.1-70B's shape: 140 GB in bf16, more than one GPU holds (run it with --tensor-parallel-size and
    # --load-format dummy for random weights made on each rank's GPU)
    "llama-3.1-70b": LlamaConfig(
        vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, head_dim=128, rope_theta=500000.0,
        rope_scaling=_llama3_rope(8.0), rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_ids=_LLAMA3_EOS, max_position_embeddings=131072,
    ),
    # SmolLM2-135M-Instruct's shape (the demo's real model): 9 query heads over 3 KV heads, hidden 576.
    "smollm2-135m": LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, rope_theta=100000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=BOS_49152, eos_token_ids=EOS_49152,
        max_position_embeddings=8192,
    ),
})  # read-only view: presets are shared constants

# The shapes the commands use when none is named (demo, bench, profile): the 1B on a GPU; on the CPU the tiny
# one, since the 1B takes minutes per token there.
DEFAULT_GPU_PRESET = "llama-3.2-1b"
CPU_PRESET = "tiny"


def preset_names() -> list[str]:
    return sorted(PRESETS)


def preset_config(name: str) -> LlamaConfig:
    """The named preset's config (LlamaConfig is frozen, so sharing the instance is safe)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"preset: unknown name {name!r}; valid presets: {', '.join(preset_names())}") from None
