"""Engine settings (frozen) and the KV-cache sizing rule.

EngineConfig's field defaults are the engine's defaults: `LLM`, `LLMEngine`, `megakernel generate` and
`megakernel serve` all take them from here (the CLIs read the class attributes, e.g. `EngineConfig.page_size`).
The module imports no torch, so the command line can build its parser without it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from models.llama.config import LlamaConfig
from models.llama.dummy_weights import check_load_format

if TYPE_CHECKING:
    import torch

BACKEND_NAMES = ("auto", "torch", "vm", "cuda")  # auto: cuda on an sm_90 GPU, else torch (engine/backends)
DTYPE_NAMES = ("bfloat16", "float16", "float32")  # torch dtypes of the same names
# Weight quantisation on load (models/llama/fp8.py): e4m3 with a scale per output channel, or per 128 x 128 block.
QUANTIZATION_NAMES = ("fp8", "fp8-block")
KV_CACHE_DTYPES = ("auto", "fp8")  # auto: the weights' dtype; fp8: e4m3 pages (models/llama/kv_cache.py)
CPU_KV_BUDGET_BYTES = 1 << 30
# Schedule policy of the vm / cuda backends: static per-SM queues filled longest-processing-time first. The
# dynamic work queue measured 2.37 vs 1.44 ms/token (1B decode, same code): an SM that finishes early claims a
# second instruction of the same op and doubles its critical path (docs/PERFORMANCE.md, design decisions).
DEFAULT_POLICY = "lpt"


@dataclass(frozen=True)
class EngineConfig:
    model: str  # a checkpoint directory, a .gguf file or a Hugging Face Hub id (models/llama/sources.py)
    revision: str | None = None  # a Hub id's branch, tag or commit
    backend: str = "auto"  # one of BACKEND_NAMES
    dtype: str = "bfloat16"  # one of DTYPE_NAMES
    device: str | None = None
    max_model_len: int | None = None  # default: the model's context, capped by KV capacity
    # Seats: sequences one step holds. 128 against 64 on an H200 serving the 1B shape (128 in / 128 out, one round,
    # same run): 128 clients 14 659 against 14 912 output tok/s with the median TTFT 243 against 541 ms (half of them
    # no longer queue for a seat), 32 clients 10 031 against 9 493 (docs/PERFORMANCE.md, Serving).
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    page_size: int = 16  # tokens per KV-cache page
    num_pages: int | None = None  # default: sized from memory
    seed: int = 0
    policy: str = DEFAULT_POLICY
    # Most decode steps one engine step may run back to back on the device without the host in between
    # (engine/decode_runs.py says when it may). The host's work between runs is paid once per run: 1B shape on
    # an H200, LLM.generate 1.03 ms/token at 1, 0.767 at 16, 0.754 at 32, 0.748 at 64 against the kernel's 0.725
    # (docs/PERFORMANCE.md). A longer run costs nothing else: a stop or a request arriving while a seat is free
    # ends it within 8 steps, and a cache too full for it gets a shorter one.
    decode_steps: int = 64
    # Share of the GPU's whole memory this engine may hold (as vLLM's flag): the KV cache gets what the weights,
    # the backend's own copy of them and other processes leave of it; the rest stays free for step buffers,
    # logits and the allocator's slack.
    gpu_memory_utilization: float = 0.9
    progress: bool = True
    # One step of look-ahead (engine/lookahead.py): the next step is scheduled and launched while the current one
    # runs, so prompt chunks and steps with requests arriving do not put the host between two steps. Its streams equal
    # those without it on the GPU too (tests/gpu/test_megakernel_async_scheduling.py). Off: an H200 serving the 1B
    # shape (64 seats, 128 in / 128 out) got 10 968 against 10 864 output tok/s at 128 clients and 6 801 against 8 861 at
    # 32 with it (one round each): it covers single steps, and under load most decode steps run in runs of decode
    # steps (engine/decode_runs.py), which it leaves as they are.
    async_scheduling: bool = False
    # The cuda backend's options as NAME=VALUE texts (engine/cuda/backend_options.py: KernelOptions and SplitParams
    # fields), as `--kernel-option` passes them; the engine's defaults where unset. The other backends ignore them.
    kernel_options: tuple[str, ...] = ()
    # "fp8": every matrix stored as e4m3 with a scale per output channel, quantised as it loads ("fp8-block": a scale
    # per 128 x 128 block; a pre-quantized FP8 checkpoint is read as it is without either); `quantization_skip` keeps
    # "lm_head" / "embed_tokens" in `dtype`.
    quantization: str | None = None
    quantization_skip: tuple[str, ...] = ()
    # "fp8": KV pages in e4m3 with a scale per layer and KV head, twice the tokens in the same memory.
    kv_cache_dtype: str = "auto"
    # Ranks the weights are split over (Megatron-style; engine/backends/__init__.py create_tensor_parallel_backend): the
    # cuda backend's one process and megakernel per GPU, the vm backend's ranks in this process, the torch backend's
    # gloo processes on CPUs; 1: one process, one device.
    tensor_parallel_size: int = 1
    # "dummy": read no weights, make random ones of the checkpoint's config on the device (each tensor-parallel rank
    # its shard): shapes too big to write out, benchmarked; "auto": the checkpoint's safetensors.
    load_format: str = "auto"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_NAMES)}, got {self.dtype!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "page_size", "decode_steps", "tensor_parallel_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_pages is not None and self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {self.num_pages}")
        if self.kernel_options:  # a typo fails here, naming the option, before anything loads
            from engine.cuda.backend_options import parse_kernel_options
            parse_kernel_options(self.kernel_options)
        if not isinstance(self.async_scheduling, bool):
            raise ValueError(f"async_scheduling must be a bool, got {self.async_scheduling!r}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.quantization is not None and self.quantization not in QUANTIZATION_NAMES:
            raise ValueError(f"quantization must be one of {list(QUANTIZATION_NAMES)}, got {self.quantization!r}")
        if self.quantization_skip:
            from models.llama.weights import SKIPPABLE
            bad = [name for name in self.quantization_skip if name not in SKIPPABLE]
            if bad:
                raise ValueError(f"quantization_skip: {bad[0]!r} is not one of {list(SKIPPABLE)}")
            if self.quantization is None:
                raise ValueError("quantization_skip needs quantization")
        check_load_format(self.load_format)
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {list(KV_CACHE_DTYPES)}, got {self.kv_cache_dtype!r}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype)

    @property
    def kv_torch_dtype(self) -> torch.dtype:
        """The KV cache's element dtype."""
        from models.llama.kv_cache import FP8_KV

        return FP8_KV if self.kv_cache_dtype == "fp8" else self.torch_dtype


def kv_bytes_per_page(config: LlamaConfig, page_size: int, dtype: torch.dtype, head_dim: int | None = None) -> int:
    """`head_dim`: the width of the backend's stored heads where wider than the config's (the vm and cuda backends
    pad some head dims: engine/instructions/head_padding.py)."""
    elem = dtype.itemsize
    return 2 * config.num_hidden_layers * config.num_key_value_heads * page_size * (head_dim or config.head_dim) * elem


def size_kv_cache(cfg: EngineConfig, model: LlamaConfig, device: torch.device,
                  reserve_bytes: int = 0, head_dim: int | None = None) -> tuple[int, int]:
    """Returns (num_pages, max_model_len) for this engine. `reserve_bytes` of free GPU memory are kept
    back for what the backend allocates after the KV cache is sized (e.g. the cuda backend's packed
    copy of the weights); `head_dim` as in kv_bytes_per_page."""
    per_page = kv_bytes_per_page(model, cfg.page_size, cfg.kv_torch_dtype, head_dim)
    want_len = cfg.max_model_len or model.max_position_embeddings
    if want_len > model.max_position_embeddings:
        raise ValueError(
            f"max_model_len {want_len} exceeds the model's max_position_embeddings "
            f"{model.max_position_embeddings}")
    if cfg.num_pages is not None:
        num_pages = cfg.num_pages
    else:
        if device.type == "cuda":
            import torch

            free, total = torch.cuda.mem_get_info(device)
            held = total - free + reserve_bytes  # weights, other processes, the backend's copy to come
            budget = int(cfg.gpu_memory_utilization * total) - held
            if budget < per_page:
                raise ValueError(
                    f"gpu_memory_utilization {cfg.gpu_memory_utilization} leaves no room for the KV cache: of "
                    f"{total / 2**30:.1f} GiB, {held / 2**30:.1f} GiB are taken by the weights, the backend's copy "
                    f"of them and other processes (raise --gpu-memory-utilization or free the GPU)")
        else:
            budget = CPU_KV_BUDGET_BYTES
        pages_for_all = cfg.max_num_seqs * -(-want_len // cfg.page_size)
        if budget < per_page:
            raise ValueError(f"no memory left for the KV cache: budget {budget} bytes < one page ({per_page} bytes)")
        num_pages = max(1, min(budget // per_page, pages_for_all))
    capacity = num_pages * cfg.page_size
    if cfg.max_model_len is not None and cfg.max_model_len > capacity:
        raise ValueError(
            f"max_model_len {cfg.max_model_len} needs {-(-cfg.max_model_len // cfg.page_size)} KV pages "
            f"but only {num_pages} fit (page_size {cfg.page_size})")
    return num_pages, min(want_len, capacity)


def check_tensor_parallel_setup(cfg: EngineConfig, backend: str, device_type: str, model: LlamaConfig) -> None:
    """A tensor_parallel_size the engine cannot run, refused before any weight loads (ValueError naming the reason or
    the config field the ranks cannot split): the torch reference's ranks on CPUs (gloo), the megakernel's on GPUs
    (one each) or on the VM (in one process)."""
    world = cfg.tensor_parallel_size
    if world == 1:
        return
    from models.llama.tensor_parallel import check_tensor_parallel

    if backend == "torch" and device_type != "cpu":
        raise ValueError(f"tensor_parallel_size {world}: the torch backend's ranks run on CPUs (got {device_type}); "
                         "on GPUs the megakernel's ranks run them (backend 'cuda')")
    if backend == "cuda":
        import torch

        if torch.cuda.device_count() < world:
            raise ValueError(f"tensor_parallel_size {world} runs one megakernel rank per GPU; "
                             f"{torch.cuda.device_count()} visible")
    # the megakernel's ranks keep the whole vocabulary (models/llama/tensor_parallel.py megakernel_shard)
    check_tensor_parallel(model, world, vocab_parallel=backend == "torch")


def tensor_parallel_rank_bytes(model: LlamaConfig, world: int, dtype_bytes: int = 2) -> int:
    """About what one megakernel rank's weights take on its GPU: its share of the layers, the whole embedding and LM
    head (the KV cache is sized before they load)."""
    H, I, L = model.hidden_size, model.intermediate_size, model.num_hidden_layers
    q, kv = model.num_attention_heads * model.head_dim, model.num_key_value_heads * model.head_dim
    layer = H * (2 * q + 2 * kv) + 3 * H * I
    return dtype_bytes * (L * layer // world + 2 * model.vocab_size * H)

