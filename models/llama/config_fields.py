"""Pieces of the config schema: `ConfigError`, the `RopeScaling` dataclass and the typed field parsers.

Split from config.py to keep each file small; import them from `models.llama.config`.
"""
from __future__ import annotations

from dataclasses import dataclass
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
        check_positive_float("rope_scaling.factor", self.factor)
        if self.rope_type == "llama3":
            check_positive_float("rope_scaling.low_freq_factor", self.low_freq_factor)
            check_positive_float("rope_scaling.high_freq_factor", self.high_freq_factor)
            # The llama3 smoothing divides by (high - low); equal factors would divide by zero.
            if not self.high_freq_factor > self.low_freq_factor:
                raise ConfigError(
                    "rope_scaling.high_freq_factor must be greater than low_freq_factor, got "
                    f"{self.high_freq_factor} <= {self.low_freq_factor}"
                )
            check_positive_int(
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
            return RopeScaling("linear", as_float("rope_scaling.factor", d["factor"]))
        for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            if key not in d:
                raise ConfigError(f"rope_scaling.{key}: required for rope_type 'llama3'")
        return RopeScaling(
            rope_type="llama3",
            factor=as_float("rope_scaling.factor", d["factor"]),
            low_freq_factor=as_float("rope_scaling.low_freq_factor", d["low_freq_factor"]),
            high_freq_factor=as_float("rope_scaling.high_freq_factor", d["high_freq_factor"]),
            original_max_position_embeddings=as_int(
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


# ---- field parsing helpers -----------------------------------------------------------------------
def as_int(name: str, v: Any) -> int:
    # bool is an int subclass in Python; `true` as a layer count is a config bug, not 1.
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise ConfigError(f"{name}: expected an integer, got {v!r}")
    return v


def as_float(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{name}: expected a number, got {v!r}")
    return float(v)


def as_bool(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name}: expected true/false, got {v!r}")
    return v


def as_eos(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, list):
        return tuple(as_int("eos_token_id", x) for x in v)
    return (as_int("eos_token_id", v),)


def check_positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(f"{name}: expected a positive integer, got {v!r}")


def check_positive_float(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConfigError(f"{name}: expected a positive number, got {v!r}")


def check_token_id(name: str, v: Any, vocab_size: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab_size:
        raise ConfigError(f"{name}: expected a token id in [0, {vocab_size}), got {v!r}")
