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

SUPPORTED_ROPE_TYPES = ("llama3", "linear")


class ConfigError(ValueError):
    """A config.json field is missing, malformed or unsupported; the message names the field."""


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. `rope_type` is "llama3" or "linear" (the latter only uses `factor`)."""

    rope_type: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ConfigError(
                f"rope_scaling.rope_type: unsupported {self.rope_type!r} "
                f"(supported: default, {', '.join(SUPPORTED_ROPE_TYPES)})"
            )
        _check_positive_float("rope_scaling.factor", self.factor)
        if self.rope_type == "llama3":
            _check_positive_float("rope_scaling.low_freq_factor", self.low_freq_factor)
            _check_positive_float("rope_scaling.high_freq_factor", self.high_freq_factor)
            # The llama3 smoothing divides by (high - low); equal factors would divide by zero.
            if not self.high_freq_factor > self.low_freq_factor:
                raise ConfigError(
                    "rope_scaling.high_freq_factor must be greater than low_freq_factor, got "
                    f"{self.high_freq_factor} <= {self.low_freq_factor}"
                )
            _check_positive_int(
                "rope_scaling.original_max_position_embeddings", self.original_max_position_embeddings
            )

    @staticmethod
    def from_dict(d: dict[str, Any] | None) -> RopeScaling | None:
        """Parse an HF `rope_scaling` / `rope_parameters` dict; "default" (or None) means no scaling."""
        if d is None:
            return None
        if not isinstance(d, dict):
            raise ConfigError(f"rope_scaling: expected a dict or null, got {type(d).__name__}")
        rope_type = d.get("rope_type", d.get("type", "default"))
        if rope_type == "default":
            return None
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ConfigError(
                f"rope_scaling.rope_type: unsupported {rope_type!r} "
                f"(supported: default, {', '.join(SUPPORTED_ROPE_TYPES)})"
            )
        if "factor" not in d:
            raise ConfigError(f"rope_scaling.factor: required for rope_type {rope_type!r}")
        if rope_type == "linear":
            return RopeScaling("linear", _as_float("rope_scaling.factor", d["factor"]))
        for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            if key not in d:
                raise ConfigError(f"rope_scaling.{key}: required for rope_type 'llama3'")
        return RopeScaling(
            rope_type="llama3",
            factor=_as_float("rope_scaling.factor", d["factor"]),
            low_freq_factor=_as_float("rope_scaling.low_freq_factor", d["low_freq_factor"]),
            high_freq_factor=_as_float("rope_scaling.high_freq_factor", d["high_freq_factor"]),
            original_max_position_embeddings=_as_int(
                "rope_scaling.original_max_position_embeddings", d["original_max_position_embeddings"]
            ),
        )

    def to_hf_dict(self) -> dict[str, Any]:
        if self.rope_type == "linear":
            return {"rope_type": "linear", "factor": self.factor}
        return {
            "rope_type": "llama3",
            "factor": self.factor,
            "low_freq_factor": self.low_freq_factor,
            "high_freq_factor": self.high_freq_factor,
            "original_max_position_embeddings": self.original_max_position_embeddings,
        }


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
            _check_positive_int(name, getattr(self, name))
        _check_positive_float("rope_theta", self.rope_theta)
        _check_positive_float("rms_norm_eps", self.rms_norm_eps)
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
            _check_token_id("bos_token_id", self.bos_token_id, self.vocab_size)
        if not isinstance(self.eos_token_ids, tuple):
            raise ConfigError(f"eos_token_id: expected a tuple of ints, got {self.eos_token_ids!r}")
        for tok in self.eos_token_ids:
            _check_token_id("eos_token_id", tok, self.vocab_size)

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
            return _as_int(key, d[key])

        heads = req_int("num_attention_heads")
        hidden = req_int("hidden_size")
        kv_heads = _as_int("num_key_value_heads", d["num_key_value_heads"]) \
            if d.get("num_key_value_heads") is not None else heads
        if d.get("head_dim") is not None:
            head_dim = _as_int("head_dim", d["head_dim"])
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
        rope_theta = _as_float("rope_theta", theta_src) if theta_src is not None else 10000.0

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
            rms_norm_eps=_as_float("rms_norm_eps", d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=_as_bool("tie_word_embeddings", d.get("tie_word_embeddings", False)),
            bos_token_id=None if bos is None else _as_int("bos_token_id", bos),
            eos_token_ids=_as_eos(d.get("eos_token_id")),
            max_position_embeddings=_as_int("max_position_embeddings", d.get("max_position_embeddings", 2048)),
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
            data = json.loads(cfg_path.read_text())
        except json.JSONDecodeError as e:
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


# ---- field parsing helpers -----------------------------------------------------------------------
def _as_int(name: str, v: Any) -> int:
    # bool is an int subclass in Python; `true` as a layer count is a config bug, not 1.
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise ConfigError(f"{name}: expected an integer, got {v!r}")
    return v


def _as_float(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{name}: expected a number, got {v!r}")
    return float(v)


def _as_bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name}: expected true/false, got {v!r}")
    return v


def _as_eos(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, list):
        return tuple(_as_int("eos_token_id", x) for x in v)
    return (_as_int("eos_token_id", v),)


def _check_positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(f"{name}: expected a positive integer, got {v!r}")


def _check_positive_float(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConfigError(f"{name}: expected a positive number, got {v!r}")


def _check_token_id(name: str, v: Any, vocab_size: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab_size:
        raise ConfigError(f"{name}: expected a token id in [0, {vocab_size}), got {v!r}")
