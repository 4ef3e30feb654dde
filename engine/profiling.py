"""`collect_profile` for `megakernel profile`: per-instruction timelines of decode steps.

--backend vm: the stream is compiled exactly as the VM / CUDA backends compile it; the times come from the cost
model's simulation of the chosen schedule (ProfileRecord.simulated = True). Only the model config is needed, so
even the 8B preset profiles in seconds on a CPU.
--backend cuda: the kernel's timing records of real decode steps (engine/cuda/profile.py).
`--steps N` means the same on both: run N decode steps (each one token longer) and record every one of them; the
record lays them back to back (profiler/steps.py), so the host's time between launches is not in it.
Both take the cuda backend's options from `--kernel-option NAME=VALUE` (engine/cuda/backend_options.py); the VM
profile applies those that change the stream (SplitParams fields), so it shows the stream a cuda run with them
would build.
"""
from __future__ import annotations

import argparse
from dataclasses import fields

import torch

from engine.backends import has_sm90_gpu
from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import load_bench_weights
from models.llama.fp8 import Fp8Scheme
from models.llama.weights import quantize_weights
from engine.cuda.backend_options import parse_kernel_options
from engine.cuda.profile import record_from_timing
from engine.engine_config import DEFAULT_POLICY, EngineConfig
from engine.instructions.layout import ModelDims, StepShape
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_cache import BuildParams, StreamCache
from engine.scheduler.compiler.target import DEFAULT_SIMULATED_SMS, TargetDevice
from engine.simulated_profile import record_from_compiled
from models.llama.config import LlamaConfig
from models.llama.presets import DEFAULT_GPU_PRESET, preset_config
from models.llama.step_batch import StepBatch
from profiler.record import MetaValue, ProfileRecord
from profiler.steps import back_to_back


def decode_batch(batch: int, context: int, page_size: int) -> StepBatch:
    """A decode step of `batch` sequences whose new token sits at position `context - 1`."""
    return decode_batch_of([context] * batch, page_size)


def decode_batch_of(contexts: list[int], page_size: int) -> StepBatch:
    """A decode step of one sequence per context, each new token at position context - 1."""
    pages = -(-max(contexts) // page_size)
    tables = [list(range(s * pages, s * pages + -(-c // page_size))) for s, c in enumerate(contexts)]
    return StepBatch.build([[1]] * len(contexts), [c - 1 for c in contexts], tables, page_size=page_size)


def chunk_batch_of(contexts: list[int], chunk: int, page_size: int) -> StepBatch:
    """A prompt chunk of one sequence per context: its last `chunk` tokens, positions context - chunk .. context - 1."""
    return last_tokens_batch_of(contexts, [chunk] * len(contexts), page_size)


def last_tokens_batch_of(contexts: list[int], lasts: list[int], page_size: int) -> StepBatch:
    """One step of one sequence per context, sequence s taking its last `lasts[s]` tokens (positions context - n ..
    context - 1): prompt chunks and, where n is 1, decodes in the same step."""
    pages = -(-max(contexts) // page_size)
    tables = [list(range(s * pages, s * pages + -(-c // page_size))) for s, c in enumerate(contexts)]
    return StepBatch.build([[1] * n for n in lasts], [c - n for c, n in zip(contexts, lasts)], tables,
                           page_size=page_size)


def profiled_chunk(args: argparse.Namespace, lengths: list[int]) -> int | None:
    """--chunk N, checked against every prompt: the first recorded step's tokens per sequence (None: a decode)."""
    chunk = getattr(args, "chunk", None)
    if chunk is not None and chunk > min(lengths):
        raise ValueError(f"--chunk {chunk} is longer than the shortest prompt ({min(lengths)} tokens; --prompt-len)")
    return chunk


def first_step_lasts(args: argparse.Namespace, lengths: list[int]) -> tuple[list[int], list[int]]:
    """(every sequence's context, the tokens it takes in the first recorded step): with --chunk the prompts' last
    --chunk tokens, then --decode-lens' sequences' last token each (a serving step mixing prompt chunks and decodes);
    without it none (the prompts are prefilled whole; --decode-lens is refused)."""
    chunk = profiled_chunk(args, lengths)
    decoding = list(getattr(args, "decode_lens", None) or ())
    if decoding and chunk is None:
        raise ValueError("--decode-lens adds decodes to a prompt chunk's step: give --chunk N too")
    return lengths + decoding, [chunk or 0] * len(lengths) + [1] * len(decoding)


def _mixed_meta(args: argparse.Namespace) -> dict[str, MetaValue]:
    """The meta of --decode-lens' sequences (none without them, so other records keep their keys)."""
    decoding = list(getattr(args, "decode_lens", None) or ())
    return {"decode_lens": _lengths_text(decoding)} if decoding else {}


def prompt_lengths(args: argparse.Namespace) -> list[int]:
    """Every sequence's prompt length: --prompt-lens, else --batch sequences of --prompt-len."""
    return list(getattr(args, "prompt_lens", None) or ()) or [int(args.prompt_len)] * int(args.batch)


def _config(args: argparse.Namespace) -> tuple[str, LlamaConfig]:
    if getattr(args, "preset", None):
        return args.preset, preset_config(args.preset)
    if getattr(args, "model", None):
        return str(args.model), LlamaConfig.from_dir(args.model)
    raise ValueError("profile: give --model DIR or --preset NAME")


def _lengths_text(lengths: list[int]) -> int | str:
    """The meta's prompt_len: one length, or each sequence's (comma-separated) where they differ."""
    return lengths[0] if len(set(lengths)) == 1 else ",".join(map(str, lengths))


def _stream_text(shape: StepShape) -> str:
    """The counts of the stream a step ran in: its own, or a larger one it ran padded in (engine/cuda/
    stream_hosting.py), as a server's step would."""
    return f"{shape.num_tokens} tokens over {shape.num_seqs} sequences"


def _options_text(options: dict[str, object]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(options.items())) or "defaults"


def collect_profile(args: argparse.Namespace) -> ProfileRecord:
    options = parse_kernel_options(getattr(args, "kernel_option", None) or ())
    backend = getattr(args, "backend", "vm")
    gpu = has_sm90_gpu()
    if backend == "cuda" or (backend == "auto" and gpu):
        if not gpu:
            raise RuntimeError("profile --backend cuda needs an sm_90 GPU; use --backend vm on this machine")
        return collect_cuda_profile(args, options)
    name, config = _config(args)
    policy = getattr(args, "policy", None) or str(options.get("policy", DEFAULT_POLICY))
    num_sms = int(getattr(args, "num_sms", None) or options.get("num_sms") or DEFAULT_SIMULATED_SMS)
    page_size = int(getattr(args, "page_size", None) or EngineConfig.page_size)
    split = {k: v for k, v in options.items() if k in {f.name for f in fields(SplitParams)} - {"num_sms"}}
    cache = StreamCache(ModelDims.from_config(config), page_size, BuildParams.of(policy, **split),
                        TargetDevice(num_sms=num_sms))
    records = []
    lengths = prompt_lengths(args)
    chunk = profiled_chunk(args, lengths)
    contexts, lasts = first_step_lasts(args, lengths)
    for step in range(args.steps):
        # after a chunk (the prompt's last tokens), decode step k's token sits at position n + k - 1
        cs = cache.get(last_tokens_batch_of(contexts, lasts, page_size) if chunk and step == 0
                       else decode_batch_of([n + step + (0 if chunk else 1) for n in contexts], page_size))
        meta: dict[str, MetaValue] = {"model": name, "backend": "vm", "batch": len(contexts),
                                      "prompt_len": _lengths_text(lengths), "chunk": chunk or 0,
                                      "steps": args.steps, "policy": policy,
                                      "num_sms": num_sms, "page_size": page_size,
                                      "kernel_options": _options_text(split), **_mixed_meta(args)}
        records.append(record_from_compiled(cs, meta))
    return back_to_back(records)


def collect_cuda_profile(args: argparse.Namespace, options: dict[str, object]) -> ProfileRecord:
    dev = torch.device("cuda")
    weights, desc = load_bench_weights(getattr(args, "model", None), getattr(args, "preset", None)
                                       or DEFAULT_GPU_PRESET, torch.bfloat16, dev)
    if getattr(args, "quantization", None) == "fp8":
        weights, desc = quantize_weights(weights, Fp8Scheme("channel")), f"{desc}, fp8 weights"
    page = int(getattr(args, "page_size", None) or EngineConfig.page_size)
    prompts_lengths, steps = prompt_lengths(args), int(args.steps)
    chunk = profiled_chunk(args, prompts_lengths) or 0
    lengths, lasts = first_step_lasts(args, prompts_lengths)
    batch = len(lengths)
    policy = getattr(args, "policy", None) or str(options.get("policy", DEFAULT_POLICY))
    backend_kw = {k: v for k, v in options.items() if k != "policy"}
    per_seq = -(-(max(lengths) + steps + 1) // page)
    backend = CudaBackend(weights, num_pages=per_seq * batch, page_size=page, policy=policy,
                          **backend_kw)  # type: ignore[arg-type]
    tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(batch)]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, weights.config.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    if chunk and sum(lasts) > backend.max_tokens_per_step:
        raise ValueError(f"--chunk {chunk} x {len(prompts_lengths)} sequences (and --decode-lens' one token each) "
                         f"is more than a step of this kernel holds ({backend.max_tokens_per_step} tokens)")
    for s in range(batch):  # prefill each sequence alone (with --chunk: all but its last chunk, or token)
        if len(prompts[s]) > lasts[s]:
            backend.prefill(prompts[s][:len(prompts[s]) - lasts[s]], tables[s])
    tokens = [p[-1] for p in prompts]
    records = []
    backend.timing = True  # every step is recorded: the same --steps meaning as the VM's
    for step in range(steps):
        if chunk and step == 0:  # the prompts' last tokens; decode step k then writes at n + k - 1
            b = StepBatch.build([p[len(p) - f:] for p, f in zip(prompts, lasts)],
                                [n - f for n, f in zip(lengths, lasts)], tables, device=dev, page_size=page)
        else:
            b = StepBatch.build([[t] for t in tokens], [n + step - (1 if chunk else 0) for n in lengths], tables,
                                device=dev, page_size=page)
        if step == 0:
            # Run the first step twice and keep the second: it then follows a launch of the same kernel, as every
            # step of the bench's loop does. After the prefill's kernels the SMs' instruction caches are cold,
            # which makes layer 0 look 12-13 µs slower than in the loop (2-3 µs). A decode step rerun with the
            # same inputs rewrites the same KV slots with the same values.
            backend.greedy(b)
        tokens = backend.greedy(b).tolist()
        meta: dict[str, MetaValue] = {"model": desc, "backend": "cuda", "batch": batch,
                                      "prompt_len": _lengths_text(prompts_lengths), "chunk": chunk,
                                      "steps": steps, "policy": policy, "num_sms": backend.num_sms,
                                      "kernel_options": _options_text(options), "gpu": torch.cuda.get_device_name(),
                                      **_mixed_meta(args), "stream": _stream_text(backend.last.compiled.shape)}
        records.append(record_from_timing(backend.last, int(backend.module.TIMING_MARK0), meta))
    return back_to_back(records)
