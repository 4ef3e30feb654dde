"""What the weights loader is asked to do with fp8 (models/llama/fp8.py) for an engine's settings and backend."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.engine_config import EngineConfig
from models.llama.fp8 import Fp8Scheme
from models.llama.fp8_checkpoint import read_checkpoint_quant

# The backends whose model code reads fp8 matrices (the torch reference dequantises them where it uses them, the VM
# row by row from its packed buffers: engine/instructions/fp8_packing.py; the megakernel streams their bytes:
# csrc/interpreter/dot_fp8.cuh).
FP8_BACKENDS = ("torch", "vm", "cuda")
# ... and those that apply 128 x 128 block scales (the megakernel applies one scale per output row).
FP8_BLOCK_BACKENDS = ("torch", "vm")


# The backends whose attention reads an fp8 KV cache (models/llama/kv_cache.py; the VM's through Buffers.kv_read).
FP8_KV_BACKENDS = ("torch", "vm")


def check_quantization(cfg: EngineConfig, backend: str) -> None:
    """Refuse `cfg.quantization` or an fp8 `cfg.kv_cache_dtype` on a backend that runs no such fp8, before any
    weight loads."""
    if cfg.quantization is not None and backend not in FP8_BACKENDS:
        raise ValueError(f"quantization {cfg.quantization!r} runs on the {' and '.join(FP8_BACKENDS)} backends: the "
                         f"{backend} backend runs no fp8 matrices")
    if cfg.quantization == "fp8-block" and backend not in FP8_BLOCK_BACKENDS:
        raise ValueError(f"quantization 'fp8-block' runs on the {' and '.join(FP8_BLOCK_BACKENDS)} backends: the "
                         f"{backend} backend applies one scale per output channel (use quantization 'fp8')")
    if cfg.kv_cache_dtype == "fp8" and backend not in FP8_KV_BACKENDS:
        raise ValueError(f"kv_cache_dtype 'fp8' runs on the {' and '.join(FP8_KV_BACKENDS)} backends: the {backend} "
                         "backend's attention reads no fp8 pages yet")


def fp8_load_options(cfg: EngineConfig, backend: str, model_dir: str | Path) -> dict[str, Any]:
    """load_weights' fp8 keywords: quantise on load where `cfg.quantization` asks for it; a pre-quantized
    checkpoint's matrices dequantised for a backend that runs no fp8, which is said on stderr (it then reads twice
    the bytes an fp8 path would)."""
    quant = read_checkpoint_quant(Path(model_dir))
    blocks = quant is not None and quant.block is not None
    runs_fp8 = backend in FP8_BACKENDS and (not blocks or backend in FP8_BLOCK_BACKENDS)
    if quant is not None and not runs_fp8 and cfg.progress:
        why = ("it applies one scale per output channel, the checkpoint has block scales" if blocks
               else "it runs no fp8 matrices")
        print(f"note: {model_dir} holds fp8 weights ({quant.method}); the {backend} backend runs them dequantised "
              f"to {cfg.dtype} ({why})", file=sys.stderr)
    schemes = {"fp8": Fp8Scheme("channel"), "fp8-block": Fp8Scheme("block")}
    return {"quantize": schemes.get(cfg.quantization or ""),
            "quantization_skip": frozenset(cfg.quantization_skip), "dequantize_fp8": not runs_fp8}
