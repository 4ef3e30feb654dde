"""Llama weights in Hugging Face layout, and the safetensors loader.

`load_weights` reads a single `model.safetensors` or a sharded checkpoint
(`model.safetensors.index.json`), tensor by tensor straight into the target dtype/device, so peak
host memory stays around one tensor. Before any data is read, `check_checkpoint` validates the
headers alone (names, shapes, dtypes, file sizes); every problem (missing or corrupt file, missing /
unexpected / mis-shaped / non-float tensor) raises `WeightLoadError` naming the tensor and the file.
Never touches the network.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tqdm import tqdm

from models.llama.checkpoint_files import INDEX_FILE, SINGLE_FILE, WeightLoadError, checkpoint_headers
from models.llama.config import LlamaConfig

__all__ = ["INDEX_FILE", "SINGLE_FILE", "LayerWeights", "LlamaWeights", "WeightLoadError", "check_checkpoint",
           "expected_shapes", "load_weights", "to_state_dict", "weights_from_state_dict"]

# Stored dtypes the loader converts from; integer or fp8 tensors would need scales or are not weights.
LOADABLE_DTYPES = ("BF16", "F16", "F32", "F64")


@dataclass(frozen=True)
class LayerWeights:
    input_layernorm: torch.Tensor  # [H]
    q_proj: torch.Tensor  # [n_heads * head_dim, H]
    k_proj: torch.Tensor  # [n_kv_heads * head_dim, H]
    v_proj: torch.Tensor  # [n_kv_heads * head_dim, H]
    o_proj: torch.Tensor  # [H, n_heads * head_dim]
    post_attention_layernorm: torch.Tensor  # [H]
    gate_proj: torch.Tensor  # [I, H]
    up_proj: torch.Tensor  # [I, H]
    down_proj: torch.Tensor  # [H, I]


@dataclass(frozen=True)
class LlamaWeights:
    config: LlamaConfig
    embed_tokens: torch.Tensor  # [V, H]
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor  # [H]
    lm_head: torch.Tensor  # [V, H]; the same object as embed_tokens when tied

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.device

    def num_bytes(self) -> int:
        """Bytes held by the distinct weight tensors (a tied LM head counts once)."""
        tensors = {id(t): t for t in (self.embed_tokens, self.norm, self.lm_head)}
        for layer in self.layers:
            for f in fields(layer):
                t = getattr(layer, f.name)
                tensors[id(t)] = t
        return sum(t.numel() * t.element_size() for t in tensors.values())


# HF tensor-name suffix inside "model.layers.{i}." -> LayerWeights field.
_LAYER_TENSORS = {
    "input_layernorm.weight": "input_layernorm",
    "self_attn.q_proj.weight": "q_proj",
    "self_attn.k_proj.weight": "k_proj",
    "self_attn.v_proj.weight": "v_proj",
    "self_attn.o_proj.weight": "o_proj",
    "post_attention_layernorm.weight": "post_attention_layernorm",
    "mlp.gate_proj.weight": "gate_proj",
    "mlp.up_proj.weight": "up_proj",
    "mlp.down_proj.weight": "down_proj",
}


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


def _ignorable(name: str, config: LlamaConfig) -> bool:
    # Old checkpoints stored the RoPE buffer; tied checkpoints may still carry a copy of lm_head.
    return name.endswith("rotary_emb.inv_freq") or (config.tie_word_embeddings and name == "lm_head.weight")


def _checked_files(model_dir: Path, config: LlamaConfig) -> dict[str, Path]:
    """Validate the checkpoint's headers against `config`; the file holding each expected tensor."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    stored = checkpoint_headers(model_dir)
    expected = expected_shapes(config)
    for name, (path, _) in stored.items():
        if name not in expected and not _ignorable(name, config):
            raise WeightLoadError(f"unexpected tensor {name!r} in {path}")
    for name, shape in expected.items():
        if name not in stored:
            where = model_dir / (INDEX_FILE if (model_dir / INDEX_FILE).is_file() else SINGLE_FILE)
            raise WeightLoadError(f"missing tensor {name!r}: not found in {where}")
        path, header = stored[name]
        if header.shape != shape:
            raise WeightLoadError(f"tensor {name!r} in {path} has shape {header.shape}, expected {shape}")
        if header.dtype not in LOADABLE_DTYPES:
            raise WeightLoadError(f"tensor {name!r} in {path} has dtype {header.dtype}, "
                                  f"expected one of {', '.join(LOADABLE_DTYPES)}")
    return {name: stored[name][0] for name in expected}


def check_checkpoint(model_dir: str | Path, config: LlamaConfig) -> None:
    """Check a checkpoint against `config` from the safetensors headers alone (names, shapes, dtypes,
    file sizes), without loading any tensor; raises `WeightLoadError` naming the file and tensor."""
    _checked_files(Path(model_dir), config)


def _assemble(config: LlamaConfig, tensors: dict[str, torch.Tensor]) -> LlamaWeights:
    layers = tuple(
        LayerWeights(**{field: tensors[f"model.layers.{i}.{suffix}"] for suffix, field in _LAYER_TENSORS.items()})
        for i in range(config.num_hidden_layers)
    )
    embed = tensors["model.embed_tokens.weight"]
    lm_head = embed if config.tie_word_embeddings else tensors["lm_head.weight"]
    return LlamaWeights(config, embed, layers, tensors["model.norm.weight"], lm_head)


def load_weights(
    model_dir: str | Path,
    config: LlamaConfig,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> LlamaWeights:
    """Load and validate a safetensors checkpoint (single file or sharded) into `dtype` on `device`."""
    files = _checked_files(Path(model_dir), config)
    tensors: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    bar = tqdm(total=len(files), desc="loading weights", unit="tensor", disable=not progress)
    for path, names in by_file.items():
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in names:
                    tensors[name] = f.get_tensor(name).to(device=device, dtype=dtype)
                    bar.update(1)
        except SafetensorError as e:  # what the header check cannot see, e.g. a file changed meanwhile
            raise WeightLoadError(f"{path}: {e}") from e
    bar.close()
    return _assemble(config, tensors)


def weights_from_state_dict(
    config: LlamaConfig,
    state_dict: dict[str, torch.Tensor],
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> LlamaWeights:
    """Build LlamaWeights from an in-memory HF state dict (tests, conversions); same validation."""
    expected = expected_shapes(config)
    for name in state_dict:
        if name not in expected and not _ignorable(name, config):
            raise WeightLoadError(f"unexpected tensor {name!r} in <state_dict>")
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in expected.items():
        if name not in state_dict:
            raise WeightLoadError(f"missing tensor {name!r}: not found in <state_dict>")
        if tuple(state_dict[name].shape) != shape:
            raise WeightLoadError(
                f"tensor {name!r} in <state_dict> has shape {tuple(state_dict[name].shape)}, expected {shape}"
            )
        tensors[name] = state_dict[name].to(device=device, dtype=dtype)
    return _assemble(config, tensors)


def to_state_dict(weights: LlamaWeights, include_lm_head: bool = True) -> dict[str, torch.Tensor]:
    """HF-named state dict (lm_head.weight included even when tied, as LlamaForCausalLM expects)."""
    out = {"model.embed_tokens.weight": weights.embed_tokens, "model.norm.weight": weights.norm}
    for i, layer in enumerate(weights.layers):
        for suffix, field in _LAYER_TENSORS.items():
            out[f"model.layers.{i}.{suffix}"] = getattr(layer, field)
    if include_lm_head:
        out["lm_head.weight"] = weights.lm_head
    return out
