"""Llama weights in Hugging Face layout, and the safetensors loader.

`load_weights` reads a single `model.safetensors` or a sharded checkpoint
(`model.safetensors.index.json`), tensor by tensor straight into the target dtype/device, so peak
host memory stays around one tensor. Before any data is read, `check_checkpoint` validates the
headers alone (names, shapes, dtypes, file sizes); every problem (missing or corrupt file, missing /
unexpected / mis-shaped / non-float tensor) raises `WeightLoadError` naming the tensor and the file.
Never touches the network. `load_format="dummy"` reads no file: random weights of the config
(models/llama/dummy_weights.py).

FP8: a pre-quantized checkpoint (models/llama/fp8_checkpoint.py) loads its e4m3 matrices as `Fp8Matrix`es, and
`quantize=` quantises a bf16 checkpoint's matrices tensor by tensor as they load (models/llama/fp8.py). A matrix
field of the dataclasses below is then an `Fp8Matrix` instead of a tensor; norms are never quantised.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tqdm import tqdm

from models.llama.checkpoint_files import INDEX_FILE, SINGLE_FILE, WeightLoadError
from models.llama.checkpoint_kv_scales import kv_head_range, read_kv_scales
from models.llama.checkpoint_plan import (CheckpointPlan, check_checkpoint, expected_shapes, ignorable, plan_checkpoint,
                                         quantizable)
from models.llama.config import LlamaConfig
from models.llama.dummy_weights import check_load_format, dummy_tensors
from models.llama.fp8 import Fp8Matrix, Fp8Scheme, quantize_fp8

__all__ = ["INDEX_FILE", "SINGLE_FILE", "LayerWeights", "LlamaWeights", "Matrix", "WeightLoadError",
           "check_checkpoint", "expected_shapes", "load_weights", "quantize_weights", "to_state_dict",
           "weights_from_state_dict"]

Matrix = torch.Tensor | Fp8Matrix


def dense(m: Matrix, dtype: torch.dtype) -> torch.Tensor:
    """The values matrix `m` stands for, in `dtype` (an fp8 matrix dequantised)."""
    return m.dequantize(dtype) if isinstance(m, Fp8Matrix) else m.to(dtype)
# What `quantization_skip` may name: the LM head and the embedding (one matrix when tied: skipping either keeps it).
SKIPPABLE = ("lm_head", "embed_tokens")


@dataclass(frozen=True)
class LayerWeights:
    input_layernorm: torch.Tensor  # [H]
    q_proj: Matrix  # [n_heads * head_dim, H]
    k_proj: Matrix  # [n_kv_heads * head_dim, H]
    v_proj: Matrix  # [n_kv_heads * head_dim, H]
    o_proj: Matrix  # [H, n_heads * head_dim]
    post_attention_layernorm: torch.Tensor  # [H]
    gate_proj: Matrix  # [I, H]
    up_proj: Matrix  # [I, H]
    down_proj: Matrix  # [H, I]


@dataclass(frozen=True)
class LlamaWeights:
    config: LlamaConfig
    embed_tokens: Matrix  # [V, H]
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor  # [H]
    lm_head: Matrix  # [V, H]; the same object as embed_tokens when tied
    # The checkpoint's own fp8 KV-cache scales (k_scale, v_scale) float32 [num_layers, KV heads], where it has them
    # (models/llama/checkpoint_kv_scales.py); None: derived from the weights (models/llama/kv_scales.py).
    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def dtype(self) -> torch.dtype:
        """The activations' dtype: the norms' (never quantised)."""
        return self.norm.dtype

    @property
    def device(self) -> torch.device:
        return self.norm.device

    @property
    def quantized(self) -> bool:
        """Whether any matrix is fp8."""
        return any(isinstance(t, Fp8Matrix) for t in self._matrices().values())

    def _matrices(self) -> dict[int, Matrix]:
        tensors: dict[int, Matrix] = {id(t): t for t in (self.embed_tokens, self.norm, self.lm_head)}
        for layer in self.layers:
            for f in fields(layer):
                t = getattr(layer, f.name)
                tensors[id(t)] = t
        return tensors

    def num_bytes(self) -> int:
        """Bytes held by the distinct weight tensors (a tied LM head counts once)."""
        return sum(t.num_bytes() if isinstance(t, Fp8Matrix) else t.numel() * t.element_size()
                   for t in self._matrices().values())


# HF tensor-name suffix inside "model.layers.{i}." -> LayerWeights field.
LAYER_TENSORS = {
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


def assemble_weights(config: LlamaConfig, tensors: dict[str, Matrix]) -> LlamaWeights:
    """LlamaWeights from HF-named matrices (the LM head is the embedding where `config` ties them)."""
    layers = tuple(
        LayerWeights(**{field: tensors[f"model.layers.{i}.{suffix}"] for suffix, field in LAYER_TENSORS.items()})
        for i in range(config.num_hidden_layers)
    )
    embed = tensors["model.embed_tokens.weight"]
    lm_head = embed if config.tie_word_embeddings else tensors["lm_head.weight"]
    return LlamaWeights(config, embed, layers, tensors["model.norm.weight"], lm_head)  # type: ignore[arg-type]


# A part of a matrix: (dim, lo, hi) = its rows (dim 0) or columns (dim 1) [lo, hi).
MatrixPart = tuple[int, int, int]


def part_of(m: Matrix, part: MatrixPart) -> Matrix:
    """Rows or columns [lo, hi) of `m` (contiguous); an fp8 matrix keeps the scales of those rows. Block-scaled fp8
    matrices are not cut (their blocks would straddle the cut)."""
    dim, lo, hi = part
    if isinstance(m, Fp8Matrix):
        if m.granularity not in ("channel", "tensor"):
            raise ValueError("fp8 matrices are cut with per-channel or per-tensor scales only")
        scale = m.scale[lo:hi] if dim == 0 and m.granularity == "channel" else m.scale
        data = m.data[lo:hi] if dim == 0 else m.data[:, lo:hi]
        return Fp8Matrix(data.contiguous(), scale.contiguous(), m.granularity, m.block)
    return (m[lo:hi] if dim == 0 else m[:, lo:hi]).contiguous()


def _skipped(name: str, config: LlamaConfig, skip: frozenset[str]) -> bool:
    """Whether `quantization_skip` keeps matrix `name` unquantised (a tied embedding is the LM head)."""
    if name == "lm_head.weight":
        return "lm_head" in skip
    if name == "model.embed_tokens.weight":
        return "embed_tokens" in skip or (config.tie_word_embeddings and "lm_head" in skip)
    return False


def load_weights(
    model_dir: str | Path,
    config: LlamaConfig,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cpu",
    progress: bool = True,
    quantize: Fp8Scheme | None = None,
    quantization_skip: frozenset[str] = frozenset(),
    dequantize_fp8: bool = False,
    parts: Mapping[str, MatrixPart] | None = None,
    load_format: str = "auto",
) -> LlamaWeights:
    """Load and validate a safetensors checkpoint (single file or sharded) into `dtype` on `device`.
    `quantize`: store every matrix but those `quantization_skip` names (SKIPPABLE) as fp8 with that scheme (a
    pre-quantized checkpoint's fp8 matrices stay as they are). `dequantize_fp8`: a pre-quantized checkpoint's fp8
    matrices become `dtype` tensors instead (a backend that runs no fp8). `parts`: keep only that part of the named
    matrices (a tensor-parallel rank's shard), read as a slice of the file; a matrix quantised on load is quantised
    whole first, so its scales are those of the whole model. `load_format` "dummy": no file is read, the weights
    (the parts `parts` names) are random, made on `device` (models/llama/dummy_weights.py)."""
    check_load_format(load_format)
    if load_format == "dummy":
        made: dict[str, Matrix] = dict(dummy_tensors(config, dtype, device, parts))
        if quantize is not None:
            kept = frozenset(n for n in made if not quantizable(n) or _skipped(n, config, quantization_skip))
            made = {name: m if name in kept else quantize_fp8(m, quantize) for name, m in made.items()}
        return assemble_weights(config, made)
    plan = plan_checkpoint(Path(model_dir), config)
    tensors: dict[str, Matrix] = {}
    by_file: dict[Path, list[str]] = {}
    for name, path in plan.files.items():
        by_file.setdefault(path, []).append(name)
    bar = tqdm(total=len(plan.files), desc="loading weights", unit="tensor", disable=not progress)
    for path, names in by_file.items():
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in names:
                    part = parts.get(name) if parts else None
                    if name in plan.scales:
                        matrix = _stored_fp8(f, name, plan, device)
                        matrix = part_of(matrix, part) if part else matrix
                        tensors[name] = matrix.dequantize(dtype) if dequantize_fp8 else matrix
                    elif quantize is not None and quantizable(name) and not _skipped(name, config,
                                                                                        quantization_skip):
                        try:
                            matrix = quantize_fp8(f.get_tensor(name).to(device=device), quantize)
                        except ValueError as e:  # a non-finite weight
                            raise WeightLoadError(f"tensor {name!r} in {path}: {e}") from e
                        tensors[name] = part_of(matrix, part) if part else matrix
                    elif part:
                        dim, lo, hi = part
                        sliced = f.get_slice(name)
                        t = sliced[lo:hi] if dim == 0 else sliced[:, lo:hi]
                        tensors[name] = t.to(device=device, dtype=dtype)
                    else:
                        tensors[name] = f.get_tensor(name).to(device=device, dtype=dtype)
                    bar.update(1)
        except SafetensorError as e:  # what the header check cannot see, e.g. a file changed meanwhile
            raise WeightLoadError(f"{path}: {e}") from e
    bar.close()
    weights = assemble_weights(config, tensors)
    kv = read_kv_scales(plan.kv_scales, config, kv_head_range(parts, config))
    return weights if kv is None else replace(weights, kv_scales=kv)


def _stored_fp8(f: object, name: str, plan: CheckpointPlan, device: torch.device | str) -> Fp8Matrix:
    """A pre-quantized checkpoint's fp8 matrix `name` (from the open file `f`) with its scale tensor."""
    scale_name, scale_path = plan.scales[name]
    with safe_open(str(scale_path), framework="pt") as sf:
        scale = sf.get_tensor(scale_name)
    assert plan.quant is not None
    try:
        return plan.quant.matrix(name, f.get_tensor(name), scale).to(device)  # type: ignore[attr-defined]
    except ValueError as e:
        raise WeightLoadError(f"{scale_path}: {e}") from e


def quantize_weights(weights: LlamaWeights, scheme: Fp8Scheme = Fp8Scheme(),
                     skip: frozenset[str] = frozenset()) -> LlamaWeights:
    """`weights` with every matrix (but those `skip` names) quantised to fp8 with `scheme`, as `load_weights` does."""
    config = weights.config
    state = to_state_dict(weights, include_lm_head=not config.tie_word_embeddings, dequantize=False)
    out: dict[str, Matrix] = {}
    for name, t in state.items():
        quantize = isinstance(t, torch.Tensor) and quantizable(name) and not _skipped(name, config, skip)
        out[name] = quantize_fp8(t, scheme) if quantize else t
    return replace(assemble_weights(config, out), kv_scales=weights.kv_scales)


def weights_from_state_dict(
    config: LlamaConfig,
    state_dict: dict[str, torch.Tensor],
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> LlamaWeights:
    """Build LlamaWeights from an in-memory HF state dict (tests, conversions); same validation."""
    expected = expected_shapes(config)
    for name in state_dict:
        if name not in expected and not ignorable(name, config):
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
    return assemble_weights(config, tensors)


def to_state_dict(weights: LlamaWeights, include_lm_head: bool = True,
                  dequantize: bool = True) -> dict[str, torch.Tensor]:
    """HF-named state dict (lm_head.weight included even when tied, as LlamaForCausalLM expects); fp8 matrices
    dequantised to float32 (the values they stand for), or as they are where `dequantize` is False."""
    out: dict[str, Matrix] = {"model.embed_tokens.weight": weights.embed_tokens, "model.norm.weight": weights.norm}
    for i, layer in enumerate(weights.layers):
        for suffix, field in LAYER_TENSORS.items():
            out[f"model.layers.{i}.{suffix}"] = getattr(layer, field)
    if include_lm_head:
        out["lm_head.weight"] = weights.lm_head
    if dequantize:
        return {k: v.dequantize(torch.float32) if isinstance(v, Fp8Matrix) else v for k, v in out.items()}
    return out  # type: ignore[return-value]
