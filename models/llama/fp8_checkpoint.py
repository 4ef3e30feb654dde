"""Pre-quantized FP8 checkpoints as they are published: config.json's `quantization_config`, and the scale tensors.

Two formats are read, both e4m3 weights (safetensors dtype F8_E4M3) with float scales beside them:
- `quant_method: "fp8"` (transformers' FineGrainedFP8 / AutoFP8 / vLLM's fp8): with `weight_block_size` [r, c] each
  `<module>.weight` has a `<module>.weight_scale_inv` of one scale per r x c block (multiplied, despite the name);
  without it a `<module>.weight_scale` per tensor ([] or [1]) or per output channel ([out] or [out, 1]).
- `quant_method: "compressed-tensors"` (llm-compressor) with format `float-quantized` (or `naive-quantized`) and one
  config group of 8-bit `float` weights, strategy `tensor`, `channel` or `block`: `<module>.weight_scale`.
Activations stay bf16 (weight-only): static `input_scale` tensors are read past. A compressed-tensors
`kv_cache_scheme` (static 8-bit float) brings its KV-cache scales as tensors (models/llama/checkpoint_kv_scales.py),
used where the KV cache is fp8 (`--kv-cache-dtype fp8`; the cache's dtype stays the engine's choice). Modules in
`ignore` / `modules_to_not_convert` are stored unquantized. Anything else is refused here, before any tensor is read,
naming the field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from models.llama.config_fields import ConfigError
from models.llama.fp8 import FP8_DTYPE, Fp8Matrix

READ_METHODS = ("fp8", "compressed-tensors")
COMPRESSED_FORMATS = ("float-quantized", "naive-quantized")
STRATEGIES = ("tensor", "channel", "block")
KV_STRATEGIES = ("tensor", "attn_head")  # one KV-cache scale per layer, or per KV head
# Tensors a quantized module may carry beside its weight and scale, read past (activation-quantization parameters).
IGNORED_SUFFIXES = (".input_scale", ".weight_zero_point", ".input_zero_point")
# Every tensor a quantized module may carry beside its weight, in any format read here.
SIDE_SUFFIXES = (".weight_scale", ".weight_scale_inv", *IGNORED_SUFFIXES)


@dataclass(frozen=True)
class CheckpointQuant:
    """How a pre-quantized checkpoint stores its fp8 weights."""

    method: str
    scale_suffix: str  # "weight_scale" or "weight_scale_inv"
    block: tuple[int, int] | None  # one scale per block of this shape; None: per tensor or per channel (by shape)

    def scale_name(self, weight_name: str) -> str:
        """`model.layers.0.mlp.up_proj.weight` -> its scale tensor's name."""
        return weight_name[: -len("weight")] + self.scale_suffix

    def is_side_tensor(self, name: str) -> bool:
        """A scale or activation parameter that belongs beside a quantized weight (not a weight itself)."""
        return name.endswith("." + self.scale_suffix) or name.endswith(IGNORED_SUFFIXES)

    def matrix(self, name: str, data: torch.Tensor, scale: torch.Tensor) -> Fp8Matrix:
        """The checkpoint's weight `name` and its scale tensor as an Fp8Matrix; a scale whose shape fits no layout
        raises ValueError naming both tensors."""
        if data.dtype != FP8_DTYPE:
            raise ValueError(f"tensor {name!r} is {data.dtype}, expected float8_e4m3fn")
        out, cols = data.shape
        s = scale.float()
        if self.block is not None:
            granularity, block = "block", self.block
        elif s.numel() == 1:
            granularity, block, s = "tensor", (1, 1), s.reshape(())
        elif tuple(s.shape) in ((out,), (out, 1)):
            granularity, block, s = "channel", (1, 1), s.reshape(out)
        else:
            raise ValueError(f"tensor {self.scale_name(name)!r} has shape {list(scale.shape)}: expected a scale per "
                             f"tensor ([] or [1]) or per output channel ([{out}] or [{out}, 1]) of {name!r}")
        try:
            return Fp8Matrix(data, s.contiguous(), granularity, block)
        except ValueError as e:
            raise ValueError(f"tensor {self.scale_name(name)!r}: {e}") from e


def _field(cfg: dict[str, Any], key: str, path: str) -> Any:
    if key not in cfg:
        raise ConfigError(f"{path}.{key}: required field is missing")
    return cfg[key]


def _block(value: Any, path: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ConfigError(f"{path}: expected two positive integers, got {value!r}")
    return int(value[0]), int(value[1])


def _fp8_method(q: dict[str, Any]) -> CheckpointQuant:
    fmt = q.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise ConfigError(f"quantization_config.fmt: only 'e4m3' fp8 weights are read, got {fmt!r}")
    size = q.get("weight_block_size")
    if size is None:
        return CheckpointQuant("fp8", "weight_scale", None)
    return CheckpointQuant("fp8", "weight_scale_inv", _block(size, "quantization_config.weight_block_size"))


def _compressed_tensors(q: dict[str, Any]) -> CheckpointQuant:
    fmt = q.get("format")
    if fmt not in COMPRESSED_FORMATS:
        raise ConfigError(f"quantization_config.format: only {' or '.join(map(repr, COMPRESSED_FORMATS))} "
                          f"(fp8 weights) is read, got {fmt!r}")
    groups = _field(q, "config_groups", "quantization_config")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise ConfigError("quantization_config.config_groups: exactly one group is read, got "
                          f"{len(groups) if isinstance(groups, dict) else type(groups).__name__}")
    (name, group), = groups.items()
    path = f"quantization_config.config_groups.{name}.weights"
    w = group.get("weights") if isinstance(group, dict) else None
    if not isinstance(w, dict):
        raise ConfigError(f"{path}: required field is missing")
    if w.get("type") != "float" or w.get("num_bits") != 8:
        raise ConfigError(f"{path}: only 8-bit 'float' weights are read, got type {w.get('type')!r} "
                          f"num_bits {w.get('num_bits')!r}")
    if w.get("symmetric", True) is not True:
        raise ConfigError(f"{path}.symmetric: only symmetric fp8 weights are read, got {w.get('symmetric')!r}")
    if w.get("dynamic", False) is not False:
        raise ConfigError(f"{path}.dynamic: weights with scales computed at run time are not read, got "
                          f"{w.get('dynamic')!r}")
    strategy = w.get("strategy", "tensor")
    if strategy not in STRATEGIES:
        raise ConfigError(f"{path}.strategy: one of {', '.join(STRATEGIES)} is read, got {strategy!r}")
    block = _block(_field(w, "block_structure", path), f"{path}.block_structure") if strategy == "block" else None
    _check_kv_cache_scheme(q.get("kv_cache_scheme"))
    return CheckpointQuant("compressed-tensors", "weight_scale", block)


def _check_kv_cache_scheme(kv: Any) -> None:
    """A kv_cache_scheme the engine reads: static 8-bit float scales, one per layer or per KV head, stored as
    `self_attn.k_scale` / `v_scale` (models/llama/checkpoint_kv_scales.py)."""
    path = "quantization_config.kv_cache_scheme"
    if kv is None:
        return
    if not isinstance(kv, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(kv).__name__}")
    if kv.get("type", "float") != "float" or kv.get("num_bits", 8) != 8:
        raise ConfigError(f"{path}: only an 8-bit 'float' KV cache is read, got type {kv.get('type')!r} "
                          f"num_bits {kv.get('num_bits')!r}")
    if kv.get("dynamic", False) is not False:
        raise ConfigError(f"{path}.dynamic: KV scales computed at run time are not read, got {kv.get('dynamic')!r}")
    if kv.get("strategy", "tensor") not in KV_STRATEGIES:
        raise ConfigError(f"{path}.strategy: one of {', '.join(KV_STRATEGIES)} is read, got {kv.get('strategy')!r}")


def checkpoint_quant(config: dict[str, Any]) -> CheckpointQuant | None:
    """The fp8 layout config.json's `quantization_config` declares; None without one. Raises ConfigError naming the
    field for a quantization this engine does not read."""
    q = config.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ConfigError(f"quantization_config: expected a JSON object, got {type(q).__name__}")
    method = q.get("quant_method")
    if method == "fp8":
        return _fp8_method(q)
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    raise ConfigError(f"quantization_config.quant_method: {method!r} is not read (fp8 checkpoints are: "
                      f"{', '.join(READ_METHODS)})")


def read_checkpoint_quant(model_dir: Path) -> CheckpointQuant | None:
    """checkpoint_quant of `model_dir/config.json` (None where there is no such file: the config check reports
    that); a ConfigError names the file and the field."""
    path = model_dir / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes())
    except ValueError as e:
        raise ConfigError(f"{path}: invalid JSON: {e}") from e
    if not isinstance(data, dict):
        return None
    try:
        return checkpoint_quant(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
