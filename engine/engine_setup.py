"""What an LLMEngine runs on, built from its EngineConfig: the checkpoint as a local directory (a Hub id or a GGUF
file is fetched or converted once), its config and tokenizer, the KV cache's size and the backend (the weights
loaded here, or a tensor-parallel group whose ranks read their own shards). Everything that can refuse the setup
(the dtype, the quantization, a shape the megakernel cannot run, sizes the ranks cannot split) is checked before
the weights load."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from engine.backends import BackendChoice, create_backend, create_tensor_parallel_backend, resolve_backend
from engine.backends.base import Backend
from engine.cuda_build import cache_root
from engine.engine_config import (EngineConfig, check_tensor_parallel_setup, size_kv_cache,
                                  tensor_parallel_rank_bytes)
from engine.instructions.head_padding import stored_head_dim
from engine.quantization import check_quantization, fp8_load_options
from models.llama.config import LlamaConfig
from models.llama.sources import resolve_model
from models.llama.tokenizer import load_tokenizer
from models.llama.weights import load_weights


@dataclass(frozen=True)
class EngineSetup:
    model_dir: str
    config: LlamaConfig
    tokenizer: PreTrainedTokenizerBase
    choice: BackendChoice
    num_pages: int
    max_model_len: int
    backend: Backend


def set_up_engine(cfg: EngineConfig) -> EngineSetup:
    model = str(resolve_model(cfg.model, cache_root() / "models", cfg.revision))
    config = LlamaConfig.from_dir(model)
    tokenizer = load_tokenizer(model)
    choice = resolve_backend(cfg.backend, cfg.device)
    if choice.name == "cuda" and cfg.dtype != "bfloat16":
        raise ValueError(f"the cuda megakernel runs bfloat16 weights; dtype {cfg.dtype!r} needs backend 'torch'")
    weights_device = choice.device if choice.name != "vm" else torch.device("cpu")
    check_quantization(cfg, choice.name)
    if choice.name == "cuda":  # a shape the megakernel cannot run fails here, before the weights load
        from engine.backends.cuda_backend import check_model_shape
        check_model_shape(config)
    # sizes the ranks cannot split fail here too, naming the field
    check_tensor_parallel_setup(cfg, choice.name, choice.device.type, config)
    load_options = dict(dtype=cfg.torch_dtype, device=weights_device, progress=cfg.progress,
                        load_format=cfg.load_format, **fp8_load_options(cfg, choice.name, model))
    # Several ranks read their shards themselves (the tensor-parallel backend), not the whole model here
    weights = load_weights(model, config, **load_options) if cfg.tensor_parallel_size == 1 else None
    # The cuda backend packs a second copy of the weights after the cache is sized: keep room for it (a
    # tensor-parallel rank: for its shard, loaded and packed after the cache is sized).
    reserve = weights.num_bytes() if weights is not None and choice.name == "cuda" else 0
    if weights is None and choice.name == "cuda":
        reserve = 2 * tensor_parallel_rank_bytes(config, cfg.tensor_parallel_size)
    # The instruction-stream backends store heads in the kernel's widths (engine/instructions/head_padding.py).
    stored = stored_head_dim(config.head_dim) if choice.name in ("vm", "cuda") else None
    num_pages, max_model_len = size_kv_cache(cfg, config, weights_device, reserve, stored)
    options: dict[str, object] = {}
    if cfg.kv_cache_dtype != "auto":  # check_quantization let it through: the torch backend
        options["kv_dtype"] = cfg.kv_torch_dtype
    if choice.name in ("vm", "cuda"):
        options["policy"] = cfg.policy
    if choice.name == "cuda" and cfg.kernel_options:
        from engine.cuda.backend_options import parse_kernel_options
        options.update(parse_kernel_options(cfg.kernel_options))
    if weights is None:
        backend = create_tensor_parallel_backend(choice, model, config, load_options, num_pages, cfg.page_size,
                                                 cfg.tensor_parallel_size, **options)
    else:
        backend = create_backend(choice, weights, num_pages, cfg.page_size, **options)
    return EngineSetup(model, config, tokenizer, choice, num_pages, max_model_len, backend)
