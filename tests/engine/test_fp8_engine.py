"""fp8 weights through the engine: `LLM(..., quantization="fp8")` computes what its dequantised weights compute, close
to the unquantised model; a pre-quantized checkpoint runs on every backend; what cannot run is refused before any
weight loads, naming the setting."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import LLM, SamplingParams
from engine.backends.torch_backend import TorchBackend
from engine.bench.logprob_error import teacher_forced
from engine.cli.main import main
from engine.engine_config import EngineConfig
from engine.quantization import check_quantization, fp8_load_options
from models.llama.config import LlamaConfig
from models.llama.fp8 import Fp8Scheme, quantize_fp8
from models.llama.weights import SINGLE_FILE, LlamaWeights, load_weights, quantize_weights, to_state_dict, \
    weights_from_state_dict

PROMPT = [5, 17, 300, 42, 9, 77, 1000, 3, 64, 128, 7, 11, 13, 500, 2, 19, 23]
CPU = torch.device("cpu")


def _scored(llm: LLM) -> list[float]:
    out = llm.generate({"prompt_token_ids": PROMPT},
                       SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, prompt_logprobs=0))[0]
    assert out.prompt_logprobs is not None
    return [entry[tok] for tok, entry in zip(PROMPT[1:], out.prompt_logprobs[1:])]  # type: ignore[index]


def _reference(weights: LlamaWeights) -> torch.Tensor:
    return teacher_forced(TorchBackend(weights, num_pages=8, page_size=16, device=CPU), PROMPT[:1], PROMPT[1:])


def test_fp8_engine_equals_its_dequantised_weights_and_stays_near_bf16(tiny_checkpoint: str) -> None:
    cfg = LlamaConfig.from_dir(tiny_checkpoint)
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", quantization="fp8", progress=False, num_pages=32)
    got = torch.tensor(_scored(llm), dtype=torch.float64)
    full = load_weights(tiny_checkpoint, cfg, dtype=torch.float32, progress=False)
    dequantised = weights_from_state_dict(cfg, to_state_dict(quantize_weights(full)))
    assert torch.allclose(got, _reference(dequantised).double(), atol=1e-4)
    # fp8's rounding (3 mantissa bits per weight, a scale per output row) moves the tiny model's logprobs a little
    drift = float((got - _reference(full).double()).abs().max())
    assert 0 < drift < 0.25, drift


def test_block_scales_on_the_torch_backend_and_the_vm(tiny_checkpoint: str) -> None:
    scores = {b: _scored(LLM(tiny_checkpoint, backend=b, dtype="float32", quantization="fp8-block", progress=False,
                             num_pages=32)) for b in ("torch", "vm")}
    assert max(abs(a - b) for a, b in zip(scores["torch"], scores["vm"])) < 1e-4
    cfg = LlamaConfig.from_dir(tiny_checkpoint)
    block = quantize_weights(load_weights(tiny_checkpoint, cfg, dtype=torch.float32, progress=False),
                             Fp8Scheme("block"))
    assert torch.allclose(torch.tensor(scores["torch"], dtype=torch.float64), _reference(block).double(), atol=1e-4)


def test_quantization_skip_keeps_the_lm_head(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", quantization="fp8", quantization_skip=("lm_head",),
              progress=False, num_pages=32)
    weights = llm.engine.backend.model.weights  # type: ignore[attr-defined]
    assert isinstance(weights.lm_head, torch.Tensor) and weights.quantized


def _prequantized_copy(src: str, dst: Path) -> Path:
    """`src` with every projection stored as fp8 with per-channel scales (compressed-tensors, as llm-compressor
    writes them)."""
    shutil.copytree(src, dst)
    state = load_file(str(dst / SINGLE_FILE))
    for name in [n for n in state if n.endswith("_proj.weight")]:
        m = quantize_fp8(state[name].float(), Fp8Scheme("channel"))
        state[name], state[name[: -len("weight")] + "weight_scale"] = m.data, m.scale[:, None]
    save_file(state, str(dst / SINGLE_FILE))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized",
                                  "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                      "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                                      "dynamic": False}}}, "ignore": ["lm_head"]}
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_a_prequantized_checkpoint_runs_on_every_backend(tiny_checkpoint: str, tmp_path: Path, capsys) -> None:
    ckpt = _prequantized_copy(tiny_checkpoint, tmp_path / "fp8")
    scores = {backend: _scored(LLM(str(ckpt), backend=backend, dtype="float32", progress=False, num_pages=32))
              for backend in ("torch", "vm")}
    assert max(abs(a - b) for a, b in zip(scores["torch"], scores["vm"])) < 1e-4
    # the cuda backend streams per-channel fp8 as it is
    options = fp8_load_options(EngineConfig(model=str(ckpt)), "cuda", ckpt)
    assert not options["dequantize_fp8"] and options["quantize"] is None
    assert capsys.readouterr().err == ""


def test_block_scaled_checkpoints_load_dequantised_for_the_megakernel(tmp_path: Path, capsys) -> None:
    # the megakernel applies one scale per output row: 128 x 128 block scales are dequantised, and that is said
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}))
    options = fp8_load_options(EngineConfig(model=str(tmp_path)), "cuda", tmp_path)
    assert options["dequantize_fp8"]
    err = capsys.readouterr().err
    assert "the cuda backend runs them dequantised to bfloat16" in err and "block scales" in err
    assert not fp8_load_options(EngineConfig(model=str(tmp_path)), "vm", tmp_path)["dequantize_fp8"]


def test_what_cannot_run_is_refused_naming_the_setting(tiny_checkpoint: str, capsys) -> None:
    with pytest.raises(ValueError, match="quantization 'fp8-block' runs on the torch and vm backends: the cuda "
                                         "backend applies one scale per output channel"):
        check_quantization(EngineConfig(model="m", quantization="fp8-block"), "cuda")
    check_quantization(EngineConfig(model="m", quantization="fp8"), "cuda")
    check_quantization(EngineConfig(model="m", quantization="fp8-block"), "vm")
    with pytest.raises(ValueError, match="quantization must be one of"):
        EngineConfig(model="m", quantization="int4")
    with pytest.raises(ValueError, match="quantization_skip: 'o_proj' is not one of"):
        EngineConfig(model="m", quantization="fp8", quantization_skip=("o_proj",))
    with pytest.raises(ValueError, match="quantization_skip needs quantization"):
        EngineConfig(model="m", quantization_skip=("lm_head",))
    argv = ["generate", "--model", tiny_checkpoint, "--prompt", "x", "--backend", "vm", "--quantization", "fp8",
            "--quantization-skip", "o_proj"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'o_proj' is not one of" in err and "Traceback" not in err


def test_generate_cli_with_fp8(tiny_checkpoint: str, capsys) -> None:
    assert main(["generate", "--model", tiny_checkpoint, "--prompt", "hi", "--max-tokens", "3", "--backend", "torch",
                 "--quantization", "fp8", "--quantization-skip", "lm_head"]) == 0
    assert "3 tokens" in capsys.readouterr().out
