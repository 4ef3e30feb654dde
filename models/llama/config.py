"""Llama model configuration: a frozen, validated view of a Hugging Face `config.json`.

`LlamaConfig.from_dict` / `from_dir` accept both the transformers-4 layout (`rope_theta` +
`rope_scaling`) and the transformers-5 layout (`rope_parameters`). Every unsupported or malformed
value raises `ConfigError` naming the offending field, so a bad checkpoint fails at load time and
not deep inside a kernel.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.llama.config_fields import (
    ConfigError,
    RopeScaling,
    as_bool,
    as_eos,
    as_float,
    as_int,
    check_positive_float,
    check_positive_int,
    check_token_id,
)

__all__ = ["ConfigError", "LlamaConfig", "RopeScaling"]


@dataclass(frozen=True)
class LlamaConfig:
    """The subset of a Llama config.json this engine supports (no biases, SiLU MLP)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    max_position_embeddings: int = 2048

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"):
            check_positive_int(name, getattr(self, name))
        check_positive_float("rope_theta", self.rope_theta)
        check_positive_float("rms_norm_eps", self.rms_norm_eps)
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"tie_word_embeddings: expected a bool, got {self.tie_word_embeddings!r}")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ConfigError(
                f"num_key_value_heads: {self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        # rotate_half splits head_dim into two halves.
        if self.head_dim % 2 != 0:
            raise ConfigError(f"head_dim: must be even for RoPE, got {self.head_dim}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ConfigError(f"rope_scaling: expected RopeScaling or None, got {self.rope_scaling!r}")
        if self.bos_token_id is not None:
            check_token_id("bos_token_id", self.bos_token_id, self.vocab_size)
        if not isinstance(self.eos_token_ids, tuple):
            raise ConfigError(f"eos_token_id: expected a tuple of ints, got {self.eos_token_ids!r}")
        for tok in self.eos_token_ids:
            check_token_id("eos_token_id", tok, self.vocab_size)

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def q_size(self) -> int:
        """Rows of q_proj: num_attention_heads * head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Rows of k_proj (and of v_proj): num_key_value_heads * head_dim."""
        return self.num_key_value_heads * self.head_dim

    @property
    def gqa_ratio(self) -> int:
        """Query heads per KV head (1 = MHA, num_attention_heads = MQA)."""
        return self.num_attention_heads // self.num_key_value_heads

    # ---- (de)serialisation ---------------------------------------------------------------------
    @staticmethod
    def from_dict(d: dict[str, Any]) -> LlamaConfig:
        """Build from the contents of an HF config.json (transformers 4 or 5 layout)."""
        if not isinstance(d, dict):
            raise ConfigError(f"config: expected a JSON object, got {type(d).__name__}")
        if "model_type" in d and d["model_type"] != "llama":
            raise ConfigError(f"model_type: expected 'llama', got {d['model_type']!r}")
        if d.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"hidden_act: only 'silu' is supported, got {d['hidden_act']!r}")
        for flag in ("attention_bias", "mlp_bias"):
            if d.get(flag, False) is not False:
                raise ConfigError(f"{flag}: biases are not supported (must be false), got {d[flag]!r}")

        def req_int(key: str) -> int:
            if key not in d:
                raise ConfigError(f"{key}: required field is missing")
            return as_int(key, d[key])

        heads = req_int("num_attention_heads")
        hidden = req_int("hidden_size")
        kv_heads = as_int("num_key_value_heads", d["num_key_value_heads"]) \
            if d.get("num_key_value_heads") is not None else heads
        if d.get("head_dim") is not None:
            head_dim = as_int("head_dim", d["head_dim"])
        else:
            if hidden % heads != 0:
                raise ConfigError(
                    f"head_dim: absent and hidden_size={hidden} is not divisible by num_attention_heads={heads}"
                )
            head_dim = hidden // heads

        # transformers 5 folds rope_theta and the scaling into "rope_parameters".
        rope_params = d.get("rope_parameters")
        if rope_params is not None and not isinstance(rope_params, dict):
            raise ConfigError(f"rope_parameters: expected a dict, got {type(rope_params).__name__}")
        scaling_src = d.get("rope_scaling")
        if scaling_src is None and rope_params is not None:
            scaling_src = rope_params
        theta_src = d.get("rope_theta")
        if theta_src is None and rope_params is not None:
            theta_src = rope_params.get("rope_theta")
        rope_theta = as_float("rope_theta", theta_src) if theta_src is not None else LlamaConfig.rope_theta

        bos = d.get("bos_token_id")
        return LlamaConfig(
            vocab_size=req_int("vocab_size"),
            hidden_size=hidden,
            intermediate_size=req_int("intermediate_size"),
            num_hidden_layers=req_int("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rope_theta=rope_theta,
            rope_scaling=RopeScaling.from_dict(scaling_src),
            rms_norm_eps=as_float("rms_norm_eps", d.get("rms_norm_eps", LlamaConfig.rms_norm_eps)),
            tie_word_embeddings=as_bool("tie_word_embeddings",
                                        d.get("tie_word_embeddings", LlamaConfig.tie_word_embeddings)),
            bos_token_id=None if bos is None else as_int("bos_token_id", bos),
            eos_token_ids=as_eos(d.get("eos_token_id")),
            max_position_embeddings=as_int("max_position_embeddings",
                                           d.get("max_position_embeddings", LlamaConfig.max_position_embeddings)),
        )

    @staticmethod
    def from_dir(path: str | Path) -> LlamaConfig:
        """Read `path/config.json`."""
        directory = Path(path)
        if not directory.is_dir():
            raise FileNotFoundError(f"model directory not found: {directory}")
        cfg_path = directory / "config.json"
        if not cfg_path.is_file():
            raise FileNotFoundError(f"config.json not found in {directory} (looked for {cfg_path})")
        try:
            data = json.loads(cfg_path.read_bytes())
        except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not text
            raise ConfigError(f"{cfg_path}: invalid JSON: {e}") from e
        try:
            return LlamaConfig.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{cfg_path}: {e}") from e

    def to_hf_dict(self, torch_dtype: str | None = None) -> dict[str, Any]:
        """The config.json contents (transformers-4 layout, which transformers 5 also reads)."""
        eos: int | list[int] | None
        eos = None if not self.eos_token_ids else (
            self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else list(self.eos_token_ids))
        out: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_scaling is None else self.rope_scaling.to_hf_dict(),
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "max_position_embeddings": self.max_position_embeddings,
        }
        if torch_dtype is not None:
            out["torch_dtype"] = torch_dtype
        return out
