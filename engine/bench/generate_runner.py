"""The `megakernel` row of `megakernel bench`: what a user gets from `LLM.generate` on the cuda backend.

The bench's weights are written as a checkpoint directory (config, tokenizer, safetensors) and served through
the public API exactly as a user would: `LLM(model=dir, backend="cuda")`, then `generate` with greedy
`SamplingParams(max_tokens=N, ignore_eos=True)` on the prompt's token ids, once to warm up (streams compiled
for the prompt's and the decode shapes) and once timed. Seconds per token = wall time from the first token's
arrival to `generate` returning, over the N - 1 decode tokens after it (prefill excluded, as in the baselines'
protocol: engine/bench/engines.py); everything the engine does per token (scheduling, launches, host syncs,
detokenising, stop checks) is inside it.
"""
from __future__ import annotations

import gc
import json
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from engine.bench.timing import synchronize
from models.llama.config import LlamaConfig
from models.llama.init_random import with_tokenizer_ids
from models.llama.tokenizer_builder import write_tokenizer
from models.llama.weights import LlamaWeights, to_state_dict


def write_config(config: LlamaConfig, dtype: torch.dtype, out_dir: Path) -> Path:
    """A checkpoint directory without weights: config.json and a generated vocab-exact tokenizer."""
    config = with_tokenizer_ids(config)
    (out_dir / "config.json").write_text(json.dumps(config.to_hf_dict(torch_dtype=str(dtype).removeprefix("torch."))))
    write_tokenizer(out_dir, config.vocab_size, config.max_position_embeddings)
    return out_dir


def write_checkpoint(weights: LlamaWeights, out_dir: Path) -> Path:
    """`weights` as a Hugging Face-layout checkpoint in out_dir, with a generated vocab-exact tokenizer."""
    config = with_tokenizer_ids(weights.config)
    write_config(weights.config, weights.dtype, out_dir)
    tensors = {name: t.detach().contiguous().cpu()
               for name, t in to_state_dict(weights, include_lm_head=not config.tie_word_embeddings).items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def write_bench_model(weights: LlamaWeights, out_dir: Path) -> tuple[Path, str]:
    """The bench's weights as a model directory an engine loads, and the load_format to load it with: a checkpoint,
    or for weights without data (the bench's --load-format dummy) only config and tokenizer ("dummy": the engine
    makes its own random weights)."""
    if weights.embed_tokens.is_meta:
        return write_config(weights.config, weights.dtype, out_dir), "dummy"
    return write_checkpoint(weights, out_dir), "auto"


# The `-sampled` row's settings: a typical chat request's filters plus a penalty, so the row shows what sampling
# on the GPU (engine/sampling) costs over greedy: top-p sorts the whole vocabulary, the penalty keeps counts.
SAMPLED_SETTINGS: dict[str, float | int] = {"temperature": 0.8, "top_p": 0.95, "top_k": 50,
                                            "repetition_penalty": 1.1, "seed": 0}


def generate_runner(weights: LlamaWeights, config: LlamaConfig, prompt_ids: list[int],
                    new_tokens: int, backend: str = "cuda", sampled: bool = False,
                    kernel_options: tuple[str, ...] = (), quantization: str | None = None,
                    tensor_parallel_size: int = 1) -> tuple[Sequence[int], float]:
    """An engine runner (engine/bench/engines.py) over the public `LLM` API on `backend`; greedy, or with
    SAMPLED_SETTINGS where `sampled`; `kernel_options`, `quantization` and `tensor_parallel_size` as `LLM(...)` takes
    them."""
    if new_tokens < 2:
        raise ValueError("the generate row times decode tokens after the first: --new-tokens must be >= 2")
    params = bench_params(sampled, max_tokens=new_tokens)
    prompt = {"prompt_token_ids": list(prompt_ids)}
    max_len = min(config.max_position_embeddings, len(prompt_ids) + new_tokens + 1)
    with bench_llm(weights, backend, max_num_seqs=1, max_model_len=max_len, kernel_options=kernel_options,
                   quantization=quantization, tensor_parallel_size=tensor_parallel_size) as llm:
        llm.generate(prompt, params)  # warm-up: compiles the streams of both shapes
        synchronize(weights.device)
        out = llm.generate(prompt, params)[0]
        end = time.monotonic()
        first = out.metrics.first_token_time
        if first is None or len(out.outputs[0].token_ids) != new_tokens:
            raise RuntimeError(f"generate returned {len(out.outputs[0].token_ids)} of {new_tokens} tokens")
        return list(out.outputs[0].token_ids), (end - first) / (new_tokens - 1)


def bench_params(sampled: bool, max_tokens: int) -> Any:
    """The rows' SamplingParams: greedy, or SAMPLED_SETTINGS; EOS ignored, so every row decodes max_tokens."""
    from engine import SamplingParams

    settings = SAMPLED_SETTINGS if sampled else {"temperature": 0.0}
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, **settings)  # type: ignore[arg-type]


@contextmanager
def bench_llm(weights: LlamaWeights, backend: str, max_num_seqs: int, max_model_len: int,
              kernel_options: tuple[str, ...] = (), quantization: str | None = None,
              tensor_parallel_size: int = 1) -> Iterator[Any]:
    """An `LLM` on `weights` written as a checkpoint (the public API, as a user loads a model); its memory (and a
    tensor-parallel engine's worker processes) given back when the block ends, before the next runner."""
    from engine import LLM

    with tempfile.TemporaryDirectory(prefix="megakernel-bench-") as d:
        model_dir, load_format = write_bench_model(weights, Path(d))
        llm = LLM(str(model_dir), backend=backend, dtype=str(weights.dtype).removeprefix("torch."), progress=False,
                  max_num_seqs=max_num_seqs, max_model_len=max_model_len, kernel_options=kernel_options,
                  quantization=quantization, tensor_parallel_size=tensor_parallel_size,
                  load_format=load_format)
    try:
        yield llm
    finally:
        llm.close()
        del llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
