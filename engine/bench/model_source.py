"""Where the bench's weights come from: a checkpoint directory, or a preset with random weights.

Random weights are generated directly on the target device (models/llama/dummy_weights.py, as the engine's
`load_format="dummy"` makes them) instead of being written to
and read back from disk: for Llama-3.2-1B that saves writing and loading 2.5 GB, and the bench only
needs the shapes and realistic magnitudes, not particular values.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.engine_config import DTYPE_NAMES
from models.llama.config import LlamaConfig
from models.llama.dummy_weights import dummy_tensors
from models.llama.presets import preset_config
from models.llama.weights import LlamaWeights, expected_shapes, load_weights, weights_from_state_dict

def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype: unsupported {name!r}; choose one of {', '.join(DTYPE_NAMES)}")
    return getattr(torch, name)


def random_weights(config: LlamaConfig, dtype: torch.dtype, device: torch.device, seed: int = 0) -> LlamaWeights:
    return weights_from_state_dict(config, dummy_tensors(config, dtype, device, seed=seed), dtype=dtype, device=device)


def shape_only_weights(config: LlamaConfig, dtype: torch.dtype) -> LlamaWeights:
    """Weights with shapes and a dtype but no data (meta tensors): the bench's `--load-format dummy`, where the
    engine rows make their own random weights (models/llama/dummy_weights.py) and the bench needs only the config
    and the bytes."""
    tensors = {name: torch.empty(shape, dtype=dtype, device="meta") for name, shape in expected_shapes(config).items()}
    return weights_from_state_dict(config, tensors, dtype=dtype, device="meta")


def fits_one_device(weights: LlamaWeights, device: torch.device, share: float = 0.9) -> bool:
    """Whether `weights` take at most `share` of one GPU's memory (always, off the GPU)."""
    if device.type != "cuda":
        return True
    return weights.num_bytes() <= share * torch.cuda.get_device_properties(device).total_memory


def load_bench_weights(model_dir: str | None, preset: str, dtype: torch.dtype, device: torch.device,
                       seed: int = 0, load_format: str = "auto") -> tuple[LlamaWeights, str]:
    """(weights, description): the checkpoint in model_dir if given, else random weights of `preset`; with
    `load_format` "dummy", shape_only_weights of either's config."""
    if load_format == "dummy":
        config = LlamaConfig.from_dir(model_dir) if model_dir is not None else preset_config(preset)
        what = model_dir if model_dir is not None else preset
        return shape_only_weights(config, dtype), f"{what} (random weights the engine makes: --load-format dummy)"
    if model_dir is not None:
        config = LlamaConfig.from_dir(model_dir)
        weights = load_weights(model_dir, config, dtype=dtype, device=device, progress=False)
        return weights, str(Path(model_dir))
    config = preset_config(preset)
    return random_weights(config, dtype, device, seed), f"{preset} (random weights, seed {seed})"
