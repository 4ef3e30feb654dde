"""Pre-quantized FP8 checkpoints in each format the loader reads (written here with safetensors), quantisation on
load, and the refusals: every one before a tensor is read, naming the field, file or tensor."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from models.llama.config import LlamaConfig
from models.llama.config_fields import ConfigError
from models.llama.fp8 import Fp8Matrix, Fp8Scheme, quantize_fp8
from models.llama.init_random import random_state_dict
from models.llama.weights import WeightLoadError, load_weights, to_state_dict
from tests.models.llama_testlib import fresh_seed, small_config

BLOCK = (16, 32)
CT_GROUP = {"targets": ["Linear"], "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                          "dynamic": True}}


def _ct(strategy: str, **weights: Any) -> dict[str, Any]:
    w = {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True, "dynamic": False, **weights}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {**CT_GROUP, "weights": w}}, "ignore": ["lm_head"]}


# name -> (quantization_config, scheme the weights are quantised with, scale tensor suffix, scale as stored)
FORMATS: dict[str, tuple[dict[str, Any], Fp8Scheme, str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "fp8-tensor": ({"quant_method": "fp8", "activation_scheme": "static"}, Fp8Scheme("tensor"), "weight_scale",
                   lambda s: s.reshape(())),
    "fp8-block": ({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": BLOCK},
                  Fp8Scheme("block", BLOCK), "weight_scale_inv", lambda s: s),
    "ct-channel": (_ct("channel"), Fp8Scheme("channel"), "weight_scale", lambda s: s[:, None].bfloat16()),
    "ct-tensor": (_ct("tensor"), Fp8Scheme("tensor"), "weight_scale", lambda s: s.reshape(1)),
    "ct-block": (_ct("block", block_structure=list(BLOCK)), Fp8Scheme("block", BLOCK), "weight_scale", lambda s: s),
}


def _write(root: Path, config: LlamaConfig, qcfg: dict[str, Any] | None, state: dict[str, torch.Tensor]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    hf = config.to_hf_dict(torch_dtype="bfloat16")
    if qcfg is not None:
        hf["quantization_config"] = qcfg
    (root / "config.json").write_text(json.dumps(hf))
    save_file({k: v.contiguous() for k, v in state.items()}, str(root / "model.safetensors"))
    return root


def _prequantized(root: Path, fmt: str, seed: int) -> tuple[Path, LlamaConfig, dict[str, Fp8Matrix]]:
    """A checkpoint of `fmt` whose projections are fp8 (the LM head and embedding bf16, as published ones are)."""
    qcfg, scheme, suffix, stored_scale = FORMATS[fmt]
    config = small_config(hidden=64, intermediate=96)
    state = {k: v.bfloat16() for k, v in random_state_dict(config, seed).items()}
    quantized: dict[str, Fp8Matrix] = {}
    for name in [n for n in state if n.endswith("_proj.weight")]:
        m = quantize_fp8(state[name].float(), scheme)
        scale = stored_scale(m.scale)
        # what the file holds (a bf16 scale rounds)
        quantized[name] = Fp8Matrix(m.data, scale.float().reshape(m.scale.shape), m.granularity, m.block)
        state[name] = m.data
        state[name[: -len("weight")] + suffix] = scale
        state[name[: -len("weight")] + "input_scale"] = torch.tensor([0.02])  # static activations: read past
    return _write(root, config, qcfg, state), config, quantized


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_loads_the_values_it_stores(tmp_path: Path, fmt: str) -> None:
    root, config, quantized = _prequantized(tmp_path / fmt, fmt, fresh_seed())
    weights = load_weights(root, config, dtype=torch.float32, progress=False)
    assert weights.quantized
    layer = weights.layers[1]
    assert isinstance(layer.gate_proj, Fp8Matrix) and isinstance(weights.lm_head, torch.Tensor)
    for name, value in to_state_dict(weights).items():
        if name in quantized:
            assert torch.equal(value, quantized[name].dequantize(torch.float32)), name
    # a backend that runs no fp8 gets the same values as tensors
    plain = load_weights(root, config, dtype=torch.float32, progress=False, dequantize_fp8=True)
    assert not plain.quantized
    assert torch.equal(plain.layers[1].gate_proj, layer.gate_proj.dequantize(torch.float32))


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("skip", [frozenset(), frozenset({"lm_head"})])
def test_quantise_on_load(tmp_path: Path, tied: bool, skip: frozenset[str]) -> None:
    config = small_config(tied=tied)
    state = random_state_dict(config, fresh_seed())
    root = _write(tmp_path / "bf16", config, None, {k: v.bfloat16() for k, v in state.items()})
    w = load_weights(root, config, dtype=torch.bfloat16, progress=False, quantize=Fp8Scheme(),
                     quantization_skip=skip)
    assert isinstance(w.layers[0].q_proj, Fp8Matrix) and w.layers[0].q_proj.granularity == "channel"
    assert isinstance(w.lm_head, Fp8Matrix) == (not skip)
    assert (w.lm_head is w.embed_tokens) == tied
    assert w.norm.dtype == torch.bfloat16 and w.dtype == torch.bfloat16
    assert w.num_bytes() < load_weights(root, config, progress=False).num_bytes() * (0.6 if not skip else 0.8)


def _refused(tmp_path: Path, edit: Callable[[dict[str, Any], dict[str, torch.Tensor]], None],
             fmt: str = "fp8-block") -> pytest.ExceptionInfo[Exception]:
    root, config, _ = _prequantized(tmp_path / "ckpt", fmt, 5)
    hf = json.loads((root / "config.json").read_text())
    from safetensors.torch import load_file
    state = load_file(str(root / "model.safetensors"))
    edit(hf, state)
    (root / "config.json").write_text(json.dumps(hf))
    save_file(state, str(root / "model.safetensors"))
    with pytest.raises((ConfigError, WeightLoadError)) as info:
        load_weights(root, config, progress=False)
    return info


SCALE = "model.layers.0.self_attn.q_proj.weight_scale_inv"


@pytest.mark.parametrize("edit, message", [
    (lambda c, s: c["quantization_config"].update(quant_method="awq"), r"quantization_config\.quant_method: 'awq'"),
    (lambda c, s: c["quantization_config"].update(fmt="e5m2"), r"quantization_config\.fmt: only 'e4m3'"),
    (lambda c, s: c["quantization_config"].update(weight_block_size=[16]), r"weight_block_size: expected two"),
    (lambda c, s: s.pop(SCALE), r"missing tensor '.*q_proj\.weight_scale_inv': the scale of fp8 tensor"),
    (lambda c, s: s.update({SCALE: s[SCALE][:1]}), r"q_proj\.weight_scale_inv.*must have shape"),
    (lambda c, s: s.update({SCALE: s[SCALE].to(torch.int32)}), r"q_proj\.weight_scale_inv.* has dtype I32"),
    (lambda c, s: c.pop("quantization_config"), r"config\.json has no quantization_config"),
    (lambda c, s: s.update({"model.layers.1.mlp.up_proj.weight": s["model.layers.1.mlp.up_proj.weight"].to(
        torch.float8_e5m2)}), r"up_proj\.weight' in .* has dtype F8_E5M2"),
])
def test_fp8_method_refusals(tmp_path: Path, edit: Callable[..., None], message: str) -> None:
    assert _refused(tmp_path, edit).match(message)


def _group(c: dict[str, Any]) -> dict[str, Any]:
    return c["quantization_config"]["config_groups"]["group_0"]["weights"]


@pytest.mark.parametrize("edit, message", [
    (lambda c, s: c["quantization_config"].update(format="pack-quantized"), r"quantization_config\.format"),
    (lambda c, s: _group(c).update(type="int"), r"group_0\.weights: only 8-bit 'float' weights"),
    (lambda c, s: _group(c).update(num_bits=4), r"group_0\.weights: only 8-bit 'float' weights"),
    (lambda c, s: _group(c).update(strategy="group"), r"group_0\.weights\.strategy"),
    (lambda c, s: _group(c).update(symmetric=False), r"group_0\.weights\.symmetric"),
    (lambda c, s: c["quantization_config"]["config_groups"].update(group_1={}), r"config_groups: exactly one"),
    (lambda c, s: _group(c).update(strategy="block"), r"group_0\.weights\.block_structure: required"),
])
def test_compressed_tensors_refusals(tmp_path: Path, edit: Callable[..., None], message: str) -> None:
    assert _refused(tmp_path, edit, fmt="ct-channel").match(message)


def test_a_non_finite_weight_is_named_when_quantised(tmp_path: Path) -> None:
    config = small_config()
    state = {k: v.bfloat16() for k, v in random_state_dict(config, 3).items()}
    state["model.layers.1.mlp.down_proj.weight"][0, 0] = float("nan")
    root = _write(tmp_path / "nan", config, None, state)
    with pytest.raises(WeightLoadError, match=r"tensor 'model\.layers\.1\.mlp\.down_proj\.weight' in .*non-finite"):
        load_weights(root, config, progress=False, quantize=Fp8Scheme())
