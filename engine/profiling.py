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
from engine.cuda.backend_options import parse_kernel_options
from engine.cuda.profile import record_from_timing
from engine.engine_config import DEFAULT_POLICY, EngineConfig
from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.step_builder_cache import BuildParams, StreamCache
from engine.scheduler.compiler.step_builder_splits import SplitParams
from engine.scheduler.compiler.target import DEFAULT_SIMULATED_SMS, TargetDevice
from engine.simulated_profile import record_from_compiled
from models.llama.config import LlamaConfig
from models.llama.presets import DEFAULT_GPU_PRESET, preset_config
from models.llama.step_batch import StepBatch
from profiler.record import MetaValue, ProfileRecord
from profiler.steps import back_to_back


def decode_batch(batch: int, context: int, page_size: int) -> StepBatch:
    """A decode step of `batch` sequences whose new token sits at position `context - 1`."""
    pages = -(-context // page_size)
    tables = [list(range(s * pages, (s + 1) * pages)) for s in range(batch)]
    return StepBatch.build([[1]] * batch, [context - 1] * batch, tables, page_size=page_size)


def _config(args: argparse.Namespace) -> tuple[str, LlamaConfig]:
    if getattr(args, "preset", None):
        return args.preset, preset_config(args.preset)
    if getattr(args, "model", None):
        return str(args.model), LlamaConfig.from_dir(args.model)
    raise ValueError("profile: give --model DIR or --preset NAME")


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
    for step in range(args.steps):
        cs = cache.get(decode_batch(args.batch, args.prompt_len + step + 1, page_size))
        meta: dict[str, MetaValue] = {"model": name, "backend": "vm", "batch": args.batch,
                                      "prompt_len": args.prompt_len, "steps": args.steps, "policy": policy,
                                      "num_sms": num_sms, "page_size": page_size,
                                      "kernel_options": _options_text(split)}
        records.append(record_from_compiled(cs, meta))
    return back_to_back(records)


def collect_cuda_profile(args: argparse.Namespace, options: dict[str, object]) -> ProfileRecord:
    dev = torch.device("cuda")
    weights, desc = load_bench_weights(getattr(args, "model", None), getattr(args, "preset", None)
                                       or DEFAULT_GPU_PRESET, torch.bfloat16, dev)
    page = int(getattr(args, "page_size", None) or EngineConfig.page_size)
    batch, prompt_len, steps = int(args.batch), int(args.prompt_len), int(args.steps)
    policy = getattr(args, "policy", None) or str(options.get("policy", DEFAULT_POLICY))
    backend_kw = {k: v for k, v in options.items() if k != "policy"}
    per_seq = -(-(prompt_len + steps + 1) // page)
    backend = CudaBackend(weights, num_pages=per_seq * batch, page_size=page, policy=policy,
                          **backend_kw)  # type: ignore[arg-type]
    tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(batch)]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, weights.config.vocab_size, (prompt_len,), generator=gen).tolist() for _ in range(batch)]
    for s in range(batch):  # prefill each sequence alone
        backend.prefill(prompts[s], tables[s])
    tokens = [p[-1] for p in prompts]
    records = []
    backend.timing = True  # every step is recorded: the same --steps meaning as the VM's
    for step in range(steps):
        b = StepBatch.build([[t] for t in tokens], [prompt_len + step] * batch, tables, device=dev, page_size=page)
        if step == 0:
            # Run the first step twice and keep the second: it then follows a launch of the same kernel, as every
            # step of the bench's loop does. After the prefill's kernels the SMs' instruction caches are cold,
            # which makes layer 0 look 12-13 µs slower than in the loop (2-3 µs). A decode step rerun with the
            # same inputs rewrites the same KV slots with the same values.
            backend.greedy(b)
        tokens = backend.greedy(b).tolist()
        meta: dict[str, MetaValue] = {"model": desc, "backend": "cuda", "batch": batch, "prompt_len": prompt_len,
                                      "steps": steps, "policy": policy, "num_sms": backend.num_sms,
                                      "kernel_options": _options_text(options), "gpu": torch.cuda.get_device_name()}
        records.append(record_from_timing(backend.last, int(backend.module.TIMING_MARK0), meta))
    return back_to_back(records)
