"""The megakernel's row of `megakernel bench`: batch-1 greedy decode on the cuda backend, timed like the baselines.

Protocol (engine/bench/baselines.py): the first P-1 prompt tokens are prefilled untimed; then N decode
steps are timed, the first taking the last prompt token. Like the CUDA-graph baselines, tokens stay on
the device between steps: each launch is followed by a tiny `advance` kernel that feeds the sampled id
back (or, with KernelOptions.fold_advance, the step's ARGMAX_REDUCE does, and with fold_embed also writes the
next step's embedding row, the streams then having no EMBED), so the host only queues launches and reads all N
ids at the end; with KernelOptions.pdl each launch may start while the one before it ends.
This loop is the `megakernel-kernel-only` row: the kernel alone, without the engine around it (the `megakernel`
row times `LLM.generate`, engine/bench/generate_runner.py).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import torch

from engine.backends import has_sm90_gpu
from engine.backends.cuda_backend import CudaBackend
from engine.bench.engines import SAMPLED_SUFFIX, EngineRunner
from engine.bench.batch_runner import batch_runner
from engine.bench.generate_runner import generate_runner
from engine.cuda.device_stream import DeviceStream, launch
from engine.cuda.kernel_options import KernelOptions
from engine.engine_config import EngineConfig
from models.llama.config import LlamaConfig
from models.llama.step_batch import StepBatch
from models.llama.fp8 import Fp8Scheme
from models.llama.weights import LlamaWeights, quantize_weights

PAGE_SIZE = EngineConfig.page_size  # the engine's KV page size


@torch.inference_mode()
def decode_on_device(backend: CudaBackend, prompt: list[int], new_tokens: int) -> tuple[list[int], float]:
    total = len(prompt) + new_tokens
    table = list(range(-(-total // PAGE_SIZE)))
    dev = backend.device
    backend.prefill(prompt[:-1], table)  # untimed: all but the last prompt token
    first = StepBatch.build([[prompt[-1]]], [len(prompt) - 1], [table], device=backend.batch_device,
                            page_size=PAGE_SIZE)
    history = torch.zeros(new_tokens, dtype=torch.int32, device=dev)
    module, stream = backend.module, torch.cuda.current_stream()

    def prepare() -> DeviceStream:
        backend.greedy(first)  # (re)loads the first step's args, builds the stream, checks errors
        ds = backend.last
        backend.load_inputs(ds)  # back to the first step's inputs
        return ds

    fold, pdl = backend.kernel.fold_advance, backend.kernel.pdl
    if not backend.embed_in_stream and not fold:
        raise ValueError("a stream without EMBED needs fold_advance in the decode loop (ARGMAX_REDUCE embeds)")

    def queue_steps(ds: DeviceStream, steps: int) -> None:
        for i in range(steps):
            ds.before_launch()
            fields = backend.launch_fields(ds)
            if fold:  # the step's ARGMAX_REDUCE writes history[i] (batch 1: one id per step) and the next args
                fields["advance_history"] = history.data_ptr() + i * history.element_size()
                fields["embed_next"] = int(not backend.embed_in_stream)
            launch(module, ds, fields)
            ds.after_launch()
            if not fold:
                module.advance(ds.step_args.data_ptr(), ds.out_tokens.data_ptr(), history.data_ptr(), i,
                               ds.status.data_ptr(), 1, stream.cuda_stream, pdl)

    warm = prepare()
    queue_steps(warm, min(8, new_tokens))  # warm-up (the timed run rewrites the same positions)
    warm.check(warm.status.cpu())
    start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ds = prepare()
    start_evt.record()
    queue_steps(ds, new_tokens)
    end_evt.record()
    torch.cuda.synchronize()
    ds.check(ds.status.cpu())
    seconds = start_evt.elapsed_time(end_evt) / 1e3 / new_tokens
    return history.cpu().tolist(), seconds


def folds_embedding(options: Mapping[str, object], config: LlamaConfig) -> bool:
    """Whether the loop's steps get their embedding rows from the previous step's ARGMAX_REDUCE (its 16-byte row
    copy needs hidden_size % 8 == 0) instead of an EMBED of their own."""
    opts = replace(KernelOptions(), **{k: v for k, v in options.items() if k in KernelOptions.names()})
    return opts.fold_advance and opts.fold_embed and config.hidden_size % 8 == 0


@dataclass(frozen=True)
class MegakernelRunner:
    """An engine runner (engine/bench/engines.py) over a CudaBackend built with `options` (its keyword arguments,
    from `--kernel-option`; the engine's defaults where unset)."""
    options: Mapping[str, object] = field(default_factory=dict)
    quantization: str | None = None  # "fp8": the weights quantised per output channel first, as LLM loads them

    def __call__(self, weights: LlamaWeights, config: LlamaConfig, prompt_ids: list[int],
                 new_tokens: int) -> tuple[Sequence[int], float]:
        pages = -(-(len(prompt_ids) + new_tokens) // PAGE_SIZE)
        kw = {**self.options, "embed_in_stream": not folds_embedding(self.options, config)}
        if self.quantization is not None:
            weights = quantize_weights(weights, Fp8Scheme("channel"))
        backend = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE, **kw)  # type: ignore[arg-type]
        return decode_on_device(backend, list(prompt_ids), new_tokens)


# The same-run one-GPU product row next to a tensor-parallel `megakernel` row
ONE_GPU_ROW = "megakernel-1gpu"


def megakernel_runners(options: Mapping[str, object], device: torch.device, batch: int = 1,
                       lengths: tuple[int, ...] = (), option_texts: tuple[str, ...] = (),
                       quantization: str | None = None, tensor_parallel_size: int = 1,
                       dummy: bool = False) -> dict[str, EngineRunner]:
    """The bench's own engine rows on an sm_90 GPU: `megakernel`, what `LLM.generate` delivers (the product path,
    engine/bench/generate_runner.py, with `option_texts` as `LLM(kernel_options=...)`), `megakernel-sampled`, the same
    with top-p / top-k / a penalty sampled on the GPU, and `megakernel-kernel-only`, this module's loop with
    `options` (the same `--kernel-option`s, parsed), so the engine's overhead over the kernel shows. Elsewhere
    `engine-torch`: `LLM.generate` on the torch backend. At `batch` > 1 the product rows only, N requests at once
    (engine/bench/batch_runner.py), of the prompt's length or of `lengths`. `quantization` ("fp8"): the batch-1
    rows run fp8 weights, and `megakernel-bf16` is the product row without it, in the same run.
    `tensor_parallel_size` > 1: `megakernel` over that many GPUs, `megakernel-1gpu`, the product row on one, and
    `torch-tp-graph`, the PyTorch decoder sharded the same way (NCCL, a CUDA graph per rank), in the same run.
    `dummy` (weights without data: the engines make their own): the product rows only."""
    on_gpu = device.type == "cuda" and has_sm90_gpu()
    if batch > 1:  # the product path with `batch` requests at once; the kernel-only loop decodes batch 1
        if not on_gpu:
            return {"engine-torch": partial(batch_runner, batch=batch, backend="torch", lengths=lengths)}
        return {"megakernel": partial(batch_runner, batch=batch, lengths=lengths, kernel_options=option_texts),
                "megakernel" + SAMPLED_SUFFIX: partial(batch_runner, batch=batch, sampled=True, lengths=lengths,
                                                       kernel_options=option_texts)}
    if batch > 1 and quantization is not None:
        raise ValueError("--quantization benches batch 1 (the batched rows run bf16 weights)")
    q = quantization
    if tensor_parallel_size > 1:
        if not on_gpu:
            raise ValueError("--tensor-parallel-size runs the megakernel's ranks: sm_90 GPUs")
        from engine.bench.tensor_parallel_baseline import NAME as TP_BASELINE, tensor_parallel_runner

        return {"megakernel": partial(generate_runner, kernel_options=option_texts,
                                      tensor_parallel_size=tensor_parallel_size),
                ONE_GPU_ROW: partial(generate_runner, kernel_options=option_texts),
                # last: the megakernel rows are measured whatever happens to it
                TP_BASELINE: partial(tensor_parallel_runner, world=tensor_parallel_size)}
    if not on_gpu:  # the engine's own torch path, timed the same way
        return {"engine-torch": partial(generate_runner, backend="torch", quantization=q)}
    rows: dict[str, EngineRunner] = {
        "megakernel": partial(generate_runner, kernel_options=option_texts, quantization=q),
        "megakernel" + SAMPLED_SUFFIX: partial(generate_runner, sampled=True, kernel_options=option_texts,
                                               quantization=q),
        "megakernel-kernel-only": MegakernelRunner(dict(options), q)}
    if dummy:
        del rows["megakernel-kernel-only"]
    if q is not None:
        rows["megakernel-bf16"] = partial(generate_runner, kernel_options=option_texts)
    return rows
