"""`BenchConfig`: what one `megakernel bench` run measures. Its field defaults are the bench's defaults (the
command line reads them from here); the module imports no torch, so the parser can be built without it."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from models.llama.dummy_weights import check_load_format
from models.llama.presets import DEFAULT_GPU_PRESET

COMPILE_FALLBACK = "default"  # torch.compile mode tried when the requested one fails
# The PyTorch baselines' runner names (engine/bench/baselines.py), and the CLI spellings accepted in
# `skip_baselines`, mapped to them.
EAGER = "eager"
CUDA_GRAPH = "cuda_graph"
COMPILE_GRAPH = "compile_graph"
# The tensor-parallel bench's PyTorch row (engine/bench/tensor_parallel_baseline.py), at --tensor-parallel-size N > 1
TP_GRAPH = "torch-tp-graph"
SKIP_ALIASES = {"eager": EAGER, "graph": CUDA_GRAPH, "cuda_graph": CUDA_GRAPH,
                "compile": COMPILE_GRAPH, "compile_graph": COMPILE_GRAPH, "tp-graph": TP_GRAPH, TP_GRAPH: TP_GRAPH}


# Sequences decoded together at --batch N (the product rows only: LLM.generate with N requests at once).
MAX_BATCH = 256


@dataclass(frozen=True)
class BenchConfig:
    model_dir: str | None = None  # a checkpoint; overrides `preset`
    preset: str = DEFAULT_GPU_PRESET  # random weights of this shape when model_dir is None
    prompt_len: int = 32
    new_tokens: int = 128
    batch: int = 1
    skip_baselines: frozenset[str] = frozenset()  # names or SKIP_ALIASES keys
    dtype: str = "bfloat16"
    device: str = "cuda"
    compile_modes: tuple[str, ...] = ("max-autotune-no-cudagraphs", COMPILE_FALLBACK)  # tried in order
    repeats: int = 3  # timed runs per runner (median reported), after one warm-up run
    seed: int = 0  # weights and prompt
    bandwidth_bytes: int | None = None  # copy buffer size; None = 2 GiB on GPU (capped), 64 MiB on CPU
    # The megakernel rows' cuda backend options as NAME=VALUE (engine/cuda/backend_options.py; kept as given, so
    # the JSON result says how it ran), for the product rows through `LLM(kernel_options=...)` and the kernel-only
    # loop alike; the engine's defaults where unset.
    kernel_options: tuple[str, ...] = ()
    # After the timed runs, each row's max |logprob - fp32 reference| on its own tokens (engine/bench/logprob_error.py)
    logprob_check: bool = True
    # > 0: time to first token of `batch` prompts of this many tokens instead of the decode bench
    # (engine/bench/prefill_bench.py)
    prefill_len: int = 0
    # Sequences of these prompt lengths decoded together (e.g. one long context among short ones); `batch` is their
    # count and `prompt_len` the first one's (sequence 0, whose tokens the rows report). Empty: `batch` prompts of
    # `prompt_len` tokens. The PyTorch baselines decode equal-length batches only: they are skipped when lengths differ.
    prompt_lens: tuple[int, ...] = ()
    # "fp8": the megakernel rows load the weights quantised (LLM(quantization=...)), next to a same-run bf16
    # `megakernel-bf16` row; the floor counts fp8 bytes. The PyTorch baselines stay bf16.
    quantization: str | None = None
    # > 1: the megakernel's product row runs over this many GPUs (LLM(tensor_parallel_size=N)), next to a same-run
    # one-GPU row `megakernel-1gpu` and the PyTorch decoder sharded the same way (`torch-tp-graph`); the floor is one
    # rank's bytes (its share of the layers and of the LM head) over the copy bandwidth. Batch 1.
    tensor_parallel_size: int = 1
    # "dummy": the product rows' engines make their own random weights (LLM(load_format="dummy"), each rank its
    # shard on its GPU): a shape too big to make here and write out (70B over several GPUs); no PyTorch baselines,
    # no logprob check.
    load_format: str = "auto"

    def lengths(self) -> tuple[int, ...]:
        """Every sequence's prompt length."""
        return self.prompt_lens or (self.prompt_len,) * self.batch

    def mixed_lengths(self) -> bool:
        return len(set(self.lengths())) > 1

    def validate(self) -> None:
        from engine.bench.model_source import parse_dtype
        from engine.cuda.backend_options import parse_kernel_options

        if not 1 <= self.batch <= MAX_BATCH:
            raise ValueError(f"batch must be in [1, {MAX_BATCH}], got {self.batch}")
        if self.prompt_len < 1 or self.new_tokens < 1:
            raise ValueError(f"prompt_len ({self.prompt_len}) and new_tokens ({self.new_tokens}) must be >= 1")
        if self.prefill_len < 0:
            raise ValueError(f"prefill_len must be >= 0, got {self.prefill_len}")
        if self.prompt_lens:
            if min(self.prompt_lens) < 1 or (self.batch, self.prompt_len) != (len(self.prompt_lens), self.prompt_lens[0]):
                raise ValueError(f"prompt_lens {list(self.prompt_lens)}: each >= 1, with batch their count and prompt_len "
                                 f"the first (got batch {self.batch}, prompt_len {self.prompt_len})")
            if self.prefill_len:
                raise ValueError("prompt_lens is for the decode bench, not with prefill_len")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        unknown = sorted(set(self.skip_baselines) - set(SKIP_ALIASES))
        if unknown:
            raise ValueError(f"skip_baselines: unknown {', '.join(unknown)}; valid: {', '.join(sorted(SKIP_ALIASES))}")
        parse_dtype(self.dtype)
        if self.quantization not in (None, "fp8"):
            raise ValueError(f"quantization must be fp8 or unset, got {self.quantization!r}")
        parse_kernel_options(self.kernel_options)
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.tensor_parallel_size > 1 and (self.batch > 1 or self.prefill_len or self.quantization):
            raise ValueError("--tensor-parallel-size benches batch-1 decode of bf16 weights (not with --batch > 1, "
                             "--prefill-len or --quantization)")
        check_load_format(self.load_format)
        if self.load_format == "dummy" and (self.batch > 1 or self.prefill_len or self.quantization):
            raise ValueError("--load-format dummy benches batch-1 decode of bf16 weights (not with --batch > 1, "
                             "--prefill-len or --quantization)")

    def skipped(self) -> set[str]:
        return {SKIP_ALIASES[s] for s in self.skip_baselines}


def positive_ints(text: str) -> tuple[int, ...] | None:
    """'1, 8,32' -> (1, 8, 32); None unless it is a non-empty comma-separated list of positive integers (the flags
    that take one say what they expected)."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        return None
    return values if values and min(values) >= 1 else None


def parse_prompt_lens(text: str) -> tuple[int, ...]:
    """`--prompt-lens`: comma-separated lengths, `LxN` for N sequences of L tokens."""
    lengths: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        length, times, count = part.partition("x")
        try:
            lengths += [int(length)] * (int(count) if times else 1)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a length or LxN: {part!r}") from None
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"prompt lengths must be >= 1: {text!r}")
    return tuple(lengths)
