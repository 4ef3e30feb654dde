"""The engine flags `generate` and `serve` share: which model, and the EngineConfig settings both expose (their
defaults are EngineConfig's field defaults, engine/engine_config.py)."""
from __future__ import annotations

import argparse
from typing import Any

from engine.cuda.kernel_option_flag import add_kernel_option_argument
from engine.engine_config import BACKEND_NAMES, DTYPE_NAMES, KV_CACHE_DTYPES, QUANTIZATION_NAMES, EngineConfig
from models.llama.dummy_weights import LOAD_FORMATS


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="a checkpoint directory (Hugging Face layout), a .gguf file or a Hugging Face Hub id")
    p.add_argument("--revision", default=EngineConfig.revision, help="a Hub id's branch, tag or commit")
    p.add_argument("--backend", default=EngineConfig.backend, choices=BACKEND_NAMES)
    p.add_argument("--dtype", default=EngineConfig.dtype, choices=DTYPE_NAMES)
    p.add_argument("--max-model-len", type=int, default=EngineConfig.max_model_len)
    p.add_argument("--seed", type=int, default=EngineConfig.seed)
    p.add_argument("--max-num-seqs", type=int, default=EngineConfig.max_num_seqs,
                   help="most sequences running at once")
    p.add_argument("--max-num-batched-tokens", type=int, default=EngineConfig.max_num_batched_tokens,
                   help="most tokens one step computes (prefill chunks and decodes together; the cuda backend "
                        "caps it at what its kernel holds)")
    p.add_argument("--gpu-memory-utilization", type=float, default=EngineConfig.gpu_memory_utilization,
                   help="share of the GPU's memory the engine may hold; the KV cache gets what the weights leave")
    p.add_argument("--decode-steps", type=int, default=EngineConfig.decode_steps,
                   help="most decode steps run back to back on the device while no waiting request could "
                        "take a seat (1: a host round trip per token)")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=EngineConfig.async_scheduling,
                   help="schedule and launch the next step while the current one runs (one step of look-ahead; "
                        "the same streams as without it); off by default: no serving gain measured on an H200 yet")
    p.add_argument("--quantization", default=EngineConfig.quantization, choices=QUANTIZATION_NAMES,
                   help="fp8: store the weights' matrices as e4m3 with a scale per output channel, quantised as they "
                        "load (fp8-block: a scale per 128 x 128 block); the torch and vm backends. A pre-quantized FP8 "
                        "checkpoint is read as it is without this flag")
    p.add_argument("--quantization-skip", default=EngineConfig.quantization_skip, metavar="NAMES", type=_names,
                   help="comma-separated matrices --quantization keeps in --dtype: lm_head, embed_tokens")
    p.add_argument("--kv-cache-dtype", default=EngineConfig.kv_cache_dtype, choices=KV_CACHE_DTYPES,
                   help="fp8: KV pages in e4m3 with a scale per layer and KV head, twice the tokens in the same memory "
                        "(the torch and vm backends)")
    p.add_argument("--tensor-parallel-size", type=int, default=EngineConfig.tensor_parallel_size,
                   help="ranks the weights are split over (Megatron-style): on the cuda backend one process and one "
                        "megakernel per GPU, on the vm backend every rank in this process, on the torch backend gloo "
                        "processes on CPUs")
    p.add_argument("--load-format", default=EngineConfig.load_format, choices=LOAD_FORMATS,
                   help="dummy: read no weights, make random ones of the checkpoint's config.json on the device (each "
                        "tensor-parallel rank its shard), to benchmark shapes too big to write out; the text is noise")
    add_kernel_option_argument(p)


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig's keywords from the flags add_engine_flags added."""
    return dict(backend=args.backend, dtype=args.dtype, max_model_len=args.max_model_len, seed=args.seed,
                max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                decode_steps=args.decode_steps, revision=args.revision,
                gpu_memory_utilization=args.gpu_memory_utilization, async_scheduling=args.async_scheduling,
                kernel_options=tuple(args.kernel_option), quantization=args.quantization,
                quantization_skip=tuple(args.quantization_skip), kv_cache_dtype=args.kv_cache_dtype,
                tensor_parallel_size=args.tensor_parallel_size, load_format=args.load_format)
