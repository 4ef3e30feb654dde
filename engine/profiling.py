"""`megakernel profile --backend vm`: a simulated per-instruction timeline of decode steps.

The stream is compiled exactly as the VM / CUDA backends compile it; the times come from the cost
model's simulation of the chosen schedule (ProfileRecord.simulated = True). Only the model config is
needed, so even the 8B preset profiles in seconds on a CPU.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import fields

import numpy as np
import torch

from engine.cuda.knobs import backend_knobs
from engine.instructions.layout import ModelDims
from engine.instructions.opcodes import OPCODE_NAMES, OPERAND_NAMES
from engine.scheduler.step_builder_cache import BuildParams, CompiledStream, StreamCache
from engine.scheduler.step_builder_splits import SplitParams
from models.llama.config import LlamaConfig
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch
from profiler.record import MetaValue, ProfileRecord, concat_records

DEFAULT_PAGE_SIZE = 16


def record_from_compiled(cs: CompiledStream, meta: dict[str, MetaValue], offset_ns: int = 0) -> ProfileRecord:
    """One step's predicted timeline; rows follow the stream's topological order. Like the GPU's
    records, a span starts when the SM took the instruction, so it includes its dependency wait."""
    tl = cs.schedule.timeline
    return ProfileRecord(
        words=cs.stream.words(), sm=tl.sm,
        start_ns=np.round(tl.start_ns - tl.wait_ns).astype(np.int64) + offset_ns,
        end_ns=np.round(tl.end_ns).astype(np.int64) + offset_ns, wait_ns=np.round(tl.wait_ns).astype(np.int64),
        opcode_names=OPCODE_NAMES, simulated=True,
        bytes_moved=np.array([c.weight_bytes + c.act_bytes for c in cs.costs], dtype=np.int64),
        meta={"source": "cost-model", "predicted_makespan_ns": int(round(tl.makespan_ns)), **meta},
        operand_names=OPERAND_NAMES,
    )


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


def split_knobs(environ: Mapping[str, str]) -> dict[str, object]:
    """The knobs of engine/cuda/knobs.py that are SplitParams fields (how a step is cut), so a VM profile
    shows the same instruction stream a cuda run with those knobs would build."""
    names = {f.name for f in fields(SplitParams)}
    return {k: v for k, v in backend_knobs(environ).items() if k in names}


def collect_profile(args: argparse.Namespace) -> ProfileRecord:
    backend = getattr(args, "backend", "vm")
    gpu = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
    if backend == "cuda" or (backend == "auto" and gpu):
        if not gpu:
            raise RuntimeError("profile --backend cuda needs an sm_90 GPU; use --backend vm on this machine")
        from engine.cuda.profile import collect_cuda_profile
        return collect_cuda_profile(args)
    name, config = _config(args)
    policy = getattr(args, "policy", None) or "dynamic"
    num_sms = int(getattr(args, "num_sms", None) or 132)
    page_size = int(getattr(args, "page_size", None) or DEFAULT_PAGE_SIZE)
    cache = StreamCache(ModelDims.from_config(config), page_size,
                        BuildParams.for_sms(num_sms, policy, **split_knobs(os.environ)))
    records, offset = [], 0
    for step in range(args.steps):
        cs = cache.get(decode_batch(args.batch, args.prompt_len + step + 1, page_size))
        meta: dict[str, MetaValue] = {"model": name, "backend": "vm", "batch": args.batch,
                                      "prompt_len": args.prompt_len, "steps": args.steps, "policy": policy,
                                      "num_sms": num_sms, "page_size": page_size}
        records.append(record_from_compiled(cs, meta, offset))
        offset = int(records[-1].end_ns.max()) + 1
    return concat_records(records)
