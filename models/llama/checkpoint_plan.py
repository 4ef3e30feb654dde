"""What a checkpoint directory must hold for a config, checked from config.json and the safetensors headers alone
(names, shapes, dtypes, file sizes; fp8 matrices with their scale tensors), before any tensor is read: every problem
raises `WeightLoadError` naming the tensor and the file (or ConfigError naming config.json's field)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from models.llama.checkpoint_files import INDEX_FILE, SINGLE_FILE, WeightLoadError, checkpoint_headers
from models.llama.checkpoint_kv_scales import is_kv_scale_tensor
from models.llama.config import LlamaConfig
from models.llama.fp8_checkpoint import SIDE_SUFFIXES, CheckpointQuant, read_checkpoint_quant

# Stored dtypes the loader converts from; fp8 matrices load with their scales (a pre-quantized checkpoint's
# quantization_config says where they are), integer tensors are not weights.
LOADABLE_DTYPES = ("BF16", "F16", "F32", "F64")
FP8_STORED = "F8_E4M3"


def expected_shapes(config: LlamaConfig, include_lm_head: bool | None = None) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape for every tensor of the checkpoint (lm_head only when untied,
    unless `include_lm_head` says otherwise)."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    per_layer = {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (config.q_size, h),
        "self_attn.k_proj.weight": (config.kv_size, h),
        "self_attn.v_proj.weight": (config.kv_size, h),
        "self_attn.o_proj.weight": (h, config.q_size),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate_proj.weight": (i, h),
        "mlp.up_proj.weight": (i, h),
        "mlp.down_proj.weight": (h, i),
    }
    for layer in range(config.num_hidden_layers):
        for suffix, shape in per_layer.items():
            shapes[f"model.layers.{layer}.{suffix}"] = shape
    shapes["model.norm.weight"] = (h,)
    if include_lm_head if include_lm_head is not None else not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    return shapes


def ignorable(name: str, config: LlamaConfig) -> bool:
    # Old checkpoints stored the RoPE buffer; tied checkpoints may still carry a copy of lm_head.
    return name.endswith("rotary_emb.inv_freq") or (config.tie_word_embeddings and name == "lm_head.weight")


def quantizable(name: str) -> bool:
    """The matrices fp8 may store: every projection, the embedding and the LM head (not the norms)."""
    return name.endswith("_proj.weight") or name in ("model.embed_tokens.weight", "lm_head.weight")


@dataclass(frozen=True)
class CheckpointPlan:
    files: dict[str, Path]  # each expected tensor's file
    scales: dict[str, tuple[str, Path]]  # an fp8 tensor's scale tensor and its file
    quant: CheckpointQuant | None
    kv_scales: dict[str, Path] = field(default_factory=dict)  # KV-cache scale tensors (checkpoint_kv_scales.py)


def plan_checkpoint(model_dir: Path, config: LlamaConfig) -> CheckpointPlan:
    """Validate the checkpoint's headers against `config` (and its quantization_config); where each tensor is."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    quant = read_checkpoint_quant(model_dir)
    stored = checkpoint_headers(model_dir)
    expected = expected_shapes(config)
    kv_scales: dict[str, Path] = {}
    for name, (path, header) in stored.items():
        if name in expected or ignorable(name, config) or (quant and quant.is_side_tensor(name)):
            continue
        if is_kv_scale_tensor(name, config):
            if header.dtype not in LOADABLE_DTYPES:
                raise WeightLoadError(f"tensor {name!r} in {path} has dtype {header.dtype}, expected one of "
                                      f"{', '.join(LOADABLE_DTYPES)}")
            kv_scales[name] = path
            continue
        if quant is None and name.endswith(SIDE_SUFFIXES):
            raise WeightLoadError(f"tensor {name!r} in {path} belongs to a quantized weight, but "
                                  f"{model_dir / 'config.json'} has no quantization_config saying how to read it")
        raise WeightLoadError(f"unexpected tensor {name!r} in {path}")
    scales: dict[str, tuple[str, Path]] = {}
    for name, shape in expected.items():
        if name not in stored:
            where = model_dir / (INDEX_FILE if (model_dir / INDEX_FILE).is_file() else SINGLE_FILE)
            raise WeightLoadError(f"missing tensor {name!r}: not found in {where}")
        path, header = stored[name]
        if header.shape != shape:
            raise WeightLoadError(f"tensor {name!r} in {path} has shape {header.shape}, expected {shape}")
        if header.dtype == FP8_STORED and quantizable(name):
            if quant is None:
                raise WeightLoadError(f"tensor {name!r} in {path} is {FP8_STORED}, but {model_dir / 'config.json'} "
                                      "has no quantization_config saying where its scales are")
            scale = quant.scale_name(name)
            if scale not in stored:
                raise WeightLoadError(f"missing tensor {scale!r}: the scale of fp8 tensor {name!r} in {path}")
            if stored[scale][1].dtype not in LOADABLE_DTYPES:
                raise WeightLoadError(f"tensor {scale!r} in {stored[scale][0]} has dtype {stored[scale][1].dtype}, "
                                      f"expected one of {', '.join(LOADABLE_DTYPES)}")
            scales[name] = (scale, stored[scale][0])
        elif header.dtype not in LOADABLE_DTYPES:
            raise WeightLoadError(f"tensor {name!r} in {path} has dtype {header.dtype}, "
                                  f"expected one of {', '.join(LOADABLE_DTYPES)}")
    return CheckpointPlan({name: stored[name][0] for name in expected}, scales, quant, kv_scales)


def check_checkpoint(model_dir: str | Path, config: LlamaConfig) -> None:
    """Check a checkpoint against `config` from the safetensors headers alone (names, shapes, dtypes,
    file sizes), without loading any tensor; raises `WeightLoadError` naming the file and tensor."""
    plan_checkpoint(Path(model_dir), config)
