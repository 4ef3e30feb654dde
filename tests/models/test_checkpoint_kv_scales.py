"""A checkpoint's own fp8 KV-cache scales (models/llama/checkpoint_kv_scales.py): llm-compressor's kv_cache_scheme
stores `self_attn.k_scale` / `v_scale` per layer (or per KV head; an older `kv_scale` for both). They load, replace
the derived scales, reach the fp8 KV cache, split over tensor-parallel ranks, and bad ones are refused by name."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.backends.torch_backend import TorchBackend
from models.llama.config_fields import ConfigError
from models.llama.kv_cache import FP8_KV
from models.llama.kv_scales import kv_scales
from models.llama.tensor_parallel import load_shard, shard_weights
from models.llama.weights import WeightLoadError, load_weights
from tests.models.test_fp8_checkpoints import _prequantized

KV_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def _with_kv(tmp_path: Path, scales: dict[str, torch.Tensor], scheme: dict[str, Any] | None = KV_SCHEME,
             fmt: str = "ct-channel") -> tuple[Path, Any]:
    root, config, _ = _prequantized(tmp_path / "ckpt", fmt, 3)
    hf = json.loads((root / "config.json").read_text())
    if scheme is not None:
        hf["quantization_config"]["kv_cache_scheme"] = scheme
    (root / "config.json").write_text(json.dumps(hf))
    state = load_file(str(root / "model.safetensors"))
    state.update(scales)
    save_file(state, str(root / "model.safetensors"))
    return root, config


def _per_layer(layers: int, k: float, v: float, name: str = "{}") -> dict[str, torch.Tensor]:
    out = {}
    for i in range(layers):
        out[f"model.layers.{i}.self_attn.k_scale"] = torch.tensor(k * (i + 1))
        out[f"model.layers.{i}.self_attn.v_scale"] = torch.tensor([v * (i + 1)])
    return out


def test_per_layer_scales_load_and_replace_the_derived_ones(tmp_path: Path) -> None:
    root, config = _with_kv(tmp_path, _per_layer(2, 0.5, 0.25))
    w = load_weights(root, config, dtype=torch.float32, progress=False)
    assert w.kv_scales is not None
    k, v = kv_scales(w)
    assert k.shape == (2, config.num_key_value_heads) and k.dtype == torch.float32
    assert torch.equal(k, torch.tensor([[0.5, 0.5], [1.0, 1.0]])) and torch.equal(v, torch.tensor([[0.25] * 2, [0.5] * 2]))
    # the fp8 KV cache of a backend takes them; a bf16 cache needs none
    backend = TorchBackend(w, num_pages=4, page_size=16, device=torch.device("cpu"), kv_dtype=FP8_KV)
    assert torch.equal(backend.kv.k_scale, k) and torch.equal(backend.kv.v_scale, v)
    # a checkpoint without them: the derived scales
    plain_root, _, _ = _prequantized(tmp_path / "plain", "ct-channel", 3)
    plain = load_weights(plain_root, config, dtype=torch.float32, progress=False)
    assert plain.kv_scales is None and not torch.equal(kv_scales(plain)[0], k)


def test_per_head_and_legacy_scales(tmp_path: Path) -> None:
    scales = {f"model.layers.{i}.self_attn.kv_scale": torch.tensor([0.1 * (i + 1), 0.2 * (i + 1)]) for i in range(2)}
    root, config = _with_kv(tmp_path, scales, scheme={**KV_SCHEME, "strategy": "attn_head"})
    k, v = load_weights(root, config, progress=False).kv_scales  # type: ignore[misc]
    assert torch.allclose(k, torch.tensor([[0.1, 0.2], [0.2, 0.4]])) and torch.equal(k, v)


def test_a_bf16_checkpoint_with_kv_scales_loads(tmp_path: Path) -> None:
    """The scale tensors are self-describing: a checkpoint without a quantization_config may carry them."""
    root, config = _with_kv(tmp_path, _per_layer(2, 2.0, 3.0), scheme=None, fmt="ct-channel")
    hf = json.loads((root / "config.json").read_text())
    hf.pop("quantization_config")
    state = {k: (v.float() if v.dtype == torch.float8_e4m3fn else v) for k, v in
             load_file(str(root / "model.safetensors")).items() if not k.endswith(("weight_scale", "input_scale"))}
    (root / "config.json").write_text(json.dumps(hf))
    save_file(state, str(root / "model.safetensors"))
    assert load_weights(root, config, progress=False).kv_scales is not None


def test_tensor_parallel_ranks_keep_their_heads(tmp_path: Path) -> None:
    scales = {f"model.layers.{i}.self_attn.{which}": torch.tensor([1.0 + i, 2.0 + i])
              for i in range(2) for which in ("k_scale", "v_scale")}
    root, config = _with_kv(tmp_path, scales, scheme={**KV_SCHEME, "strategy": "attn_head"})
    whole = load_weights(root, config, dtype=torch.float32, progress=False)
    for rank in range(2):
        read = load_shard(root, config, rank, 2, dtype=torch.float32, progress=False)
        cut = shard_weights(whole, rank, 2)
        assert read.kv_scales is not None and cut.kv_scales is not None
        assert torch.equal(read.kv_scales[0], whole.kv_scales[0][:, rank:rank + 1])  # type: ignore[index]
        assert torch.equal(cut.kv_scales[0], read.kv_scales[0]) and torch.equal(cut.kv_scales[1], read.kv_scales[1])


@pytest.mark.parametrize("scales, message", [
    ({"model.layers.0.self_attn.k_scale": torch.tensor(1.0), "model.layers.0.self_attn.v_scale": torch.tensor(1.0)},
     r"missing tensor 'model\.layers\.1\.self_attn\.k_scale': the checkpoint has KV-cache scales for some layers"),
    ({**_per_layer(2, 1.0, 1.0), "model.layers.1.self_attn.v_scale": torch.tensor(0.0)},
     r"'model\.layers\.1\.self_attn\.v_scale'.*must be positive and finite"),
    ({**_per_layer(2, 1.0, 1.0), "model.layers.0.self_attn.k_scale": torch.tensor(float("nan"))},
     r"'model\.layers\.0\.self_attn\.k_scale'.*must be positive and finite"),
    ({**_per_layer(2, 1.0, 1.0), "model.layers.0.self_attn.k_scale": torch.ones(3)},
     r"'model\.layers\.0\.self_attn\.k_scale'.* has 3 elements"),
    ({**_per_layer(2, 1.0, 1.0), "model.layers.0.self_attn.k_scale": torch.tensor(1, dtype=torch.int32)},
     r"'model\.layers\.0\.self_attn\.k_scale'.* has dtype I32"),
    ({"model.layers.7.self_attn.k_scale": torch.tensor(1.0)}, r"unexpected tensor 'model\.layers\.7\.self_attn"),
])
def test_bad_scales_are_refused_by_name(tmp_path: Path, scales: dict[str, torch.Tensor], message: str) -> None:
    root, config = _with_kv(tmp_path, scales)
    with pytest.raises(WeightLoadError, match=message):
        load_weights(root, config, progress=False)


@pytest.mark.parametrize("scheme, message", [
    ({**KV_SCHEME, "type": "int"}, r"kv_cache_scheme: only an 8-bit 'float' KV cache"),
    ({**KV_SCHEME, "num_bits": 4}, r"kv_cache_scheme: only an 8-bit 'float' KV cache"),
    ({**KV_SCHEME, "dynamic": True}, r"kv_cache_scheme\.dynamic"),
    ({**KV_SCHEME, "strategy": "channel"}, r"kv_cache_scheme\.strategy"),
    ("fp8", r"kv_cache_scheme: expected a JSON object"),
])
def test_kv_cache_schemes_not_read_are_refused_by_field(tmp_path: Path, scheme: Any, message: str) -> None:
    root, config = _with_kv(tmp_path, _per_layer(2, 1.0, 1.0), scheme=scheme)
    with pytest.raises(ConfigError, match=message):
        load_weights(root, config, progress=False)
