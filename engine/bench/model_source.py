"""Where the bench's weights come from: a checkpoint directory, or a preset with random weights.

Random weights are generated directly on the target device (same distributions as
models.llama.init_random: matrices ~ N(0, 0.02), norms ~ 1 + N(0, 0.05)) instead of being written to
and read back from disk: for Llama-3.2-1B that saves writing and loading 2.5 GB, and the bench only
needs the shapes and realistic magnitudes, not particular values.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.engine_config import DTYPE_NAMES
from models.llama.config import LlamaConfig
from models.llama.init_random import NORM_NOISE_STD, WEIGHT_STD
from models.llama.presets import preset_config
from models.llama.weights import LlamaWeights, expected_shapes, load_weights, weights_from_state_dict

def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype: unsupported {name!r}; choose one of {', '.join(DTYPE_NAMES)}")
    return getattr(torch, name)


def random_weights(config: LlamaConfig, dtype: torch.dtype, device: torch.device, seed: int = 0) -> LlamaWeights:
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(config).items():
        t = torch.empty(shape, dtype=dtype, device=device)
        if name.endswith("norm.weight"):
            t.normal_(1.0, NORM_NOISE_STD, generator=gen)
        else:
            t.normal_(0.0, WEIGHT_STD, generator=gen)
        tensors[name] = t
    return weights_from_state_dict(config, tensors, dtype=dtype, device=device)


def load_bench_weights(model_dir: str | None, preset: str, dtype: torch.dtype, device: torch.device,
                       seed: int = 0) -> tuple[LlamaWeights, str]:
    """(weights, description): the checkpoint in model_dir if given, else random weights of `preset`."""
    if model_dir is not None:
        config = LlamaConfig.from_dir(model_dir)
        weights = load_weights(model_dir, config, dtype=dtype, device=device, progress=False)
        return weights, str(Path(model_dir))
    config = preset_config(preset)
    return random_weights(config, dtype, device, seed), f"{preset} (random weights, seed {seed})"
