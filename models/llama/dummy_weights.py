"""Random weights made on the device that runs them, for a checkpoint directory with a config (and a tokenizer) but
no weights to read: `load_format="dummy"` (as vLLM's `--load-format dummy`). A shape whose weights nobody wants to
write and read back (a 70B over several GPUs: 140 GB) is benchmarked this way; the values are random, the text is
noise.

Every tensor has its own generator, seeded from its name and the part of it a tensor-parallel rank keeps, so a
tensor every rank holds whole (the megakernel's embedding and LM head) is the same on every rank of one GPU type,
and a rank makes only its own part. The distributions are also init_random's (the checkpoints it writes): matrices ~
N(0, 0.02), norms ~ 1 + N(0, 0.05).
"""
from __future__ import annotations

import zlib
from collections.abc import Mapping

import torch

from models.llama.checkpoint_plan import expected_shapes
from models.llama.config import LlamaConfig

WEIGHT_STD = 0.02
NORM_NOISE_STD = 0.05
# load_weights' `load_format`: read the checkpoint's safetensors, or make random weights of its config
LOAD_FORMATS = ("auto", "dummy")


def check_load_format(load_format: str) -> None:
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format must be one of {list(LOAD_FORMATS)}, got {load_format!r}")


def fill_random(name: str, t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`t` filled as a random checkpoint's tensor `name` is: norm weights ~ 1 + N(0, 0.05), matrices ~ N(0, 0.02)."""
    if name.endswith("norm.weight"):
        return t.normal_(1.0, NORM_NOISE_STD, generator=generator)
    return t.normal_(0.0, WEIGHT_STD, generator=generator)


def dummy_tensors(config: LlamaConfig, dtype: torch.dtype, device: torch.device | str,
                  parts: Mapping[str, tuple[int, int, int]] | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every tensor the checkpoint of `config` would hold (only the part `parts` names of a matrix: dim, begin,
    end), random, in `dtype` on `device`."""
    out: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(config).items():
        part = parts.get(name) if parts else None
        if part is not None:
            dim, lo, hi = part
            shape = tuple(hi - lo if d == dim else s for d, s in enumerate(shape))
        gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + zlib.crc32(f"{name}:{part}".encode()))
        out[name] = fill_random(name, torch.empty(shape, dtype=dtype, device=device), gen)
    return out
