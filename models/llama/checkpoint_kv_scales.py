"""An fp8 KV cache's scales as a checkpoint stores them (llm-compressor's `kv_cache_scheme`, vLLM's fp8 checkpoints).

Calibrated checkpoints carry, per attention layer, `model.layers.N.self_attn.k_scale` and `.v_scale` (or one older
`.kv_scale` for both), float tensors of one element (per layer) or one per KV head. The cache stores k / k_scale and
v / v_scale in e4m3 (models/llama/kv_cache.py), the convention these checkpoints are calibrated for. With them the
engine uses the checkpoint's scales instead of the ones it derives from the weights (models/llama/kv_scales.py);
they matter only where the KV cache is fp8 (`--kv-cache-dtype fp8`). A checkpoint that has them for some layers
only, or a scale that is not a positive finite number, is refused naming the tensor.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from models.llama.checkpoint_files import WeightLoadError
from models.llama.config import LlamaConfig

KV_SCALE_TENSOR = re.compile(r"model\.layers\.(\d+)\.self_attn\.(k_scale|v_scale|kv_scale)")


def is_kv_scale_tensor(name: str, config: LlamaConfig) -> bool:
    """Whether `name` is a KV-cache scale of one of the model's layers."""
    m = KV_SCALE_TENSOR.fullmatch(name)
    return m is not None and int(m.group(1)) < config.num_hidden_layers


def _per_head(name: str, path: Path, t: torch.Tensor, heads: int) -> torch.Tensor:
    """A stored scale as one float per KV head: one element (the layer's) broadcast, or one per head."""
    s = t.detach().float().reshape(-1)
    if s.numel() not in (1, heads):
        raise WeightLoadError(f"tensor {name!r} in {path} has {s.numel()} elements: a KV-cache scale is one per "
                              f"layer or one per KV head ({heads})")
    if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
        raise WeightLoadError(f"tensor {name!r} in {path}: KV-cache scales must be positive and finite")
    return s.expand(heads).clone() if s.numel() == 1 else s


def read_kv_scales(files: dict[str, Path], config: LlamaConfig,
                   heads: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(k_scale, v_scale) float32 [num_layers, KV heads] from the checkpoint's scale tensors (`files`: name -> file),
    None where it has none. `heads`: keep KV heads [lo, hi) (a tensor-parallel rank's)."""
    if not files:
        return None
    n_kv = config.num_key_value_heads
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    read: dict[tuple[int, str], torch.Tensor] = {}
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            for name in names:
                m = KV_SCALE_TENSOR.fullmatch(name)
                assert m is not None
                read[(int(m.group(1)), m.group(2))] = _per_head(name, path, f.get_tensor(name), n_kv)
    k_rows, v_rows = [], []
    for layer in range(config.num_hidden_layers):
        both = read.get((layer, "kv_scale"))
        k, v = read.get((layer, "k_scale"), both), read.get((layer, "v_scale"), both)
        if k is None or v is None:
            missing = "k_scale" if k is None else "v_scale"
            raise WeightLoadError(f"missing tensor 'model.layers.{layer}.self_attn.{missing}': the checkpoint has "
                                  f"KV-cache scales for some layers, so every layer needs them")
        k_rows.append(k)
        v_rows.append(v)
    lo, hi = heads if heads is not None else (0, n_kv)
    return torch.stack(k_rows)[:, lo:hi].contiguous(), torch.stack(v_rows)[:, lo:hi].contiguous()


def kv_head_range(parts: Mapping[str, tuple[int, int, int]] | None, config: LlamaConfig) -> tuple[int, int] | None:
    """The KV heads [lo, hi) a part of the K projection keeps (a tensor-parallel rank's: load_weights' `parts`);
    None: all of them."""
    part = parts.get("model.layers.0.self_attn.k_proj.weight") if parts else None
    if part is None:
        return None
    _, lo, hi = part
    return lo // config.head_dim, hi // config.head_dim
