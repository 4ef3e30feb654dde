"""`megakernel profile --backend cuda`: real per-instruction timings from the kernel's timing records.

Decode steps run with timing compiled in (the kernel's TIMING instantiation); each record holds
%globaltimer at start, when its dependencies were satisfied, and at the end (after its counter
signal), plus the SM id, then sub-phase marks (csrc/interpreter/marks.cuh, profiler/marks.py). Rows
follow the stream's topological order (instruction id). The bench's MEGAKERNEL_* knobs apply here too.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch

from engine.backends.cuda_backend import DEFAULT_POLICY, CudaBackend
from engine.bench.model_source import load_bench_weights
from engine.cuda.knobs import backend_knobs
from engine.cuda.variant import VARIANT_NAMES
from engine.instructions.opcodes import OPCODE_NAMES, OPERAND_NAMES
from models.llama.step_batch import StepBatch
from profiler.record import MetaValue, ProfileRecord, concat_records


def record_from_timing(backend: CudaBackend, meta: dict[str, MetaValue]) -> ProfileRecord:
    """The last timed step's records; its meta gains the kernel variant that ran it (engine/cuda/variant.py)."""
    ds = backend.last
    if ds is None or ds.timing is None:
        raise RuntimeError("no timed step has run")
    t = ds.timing.cpu().numpy().astype(np.int64)
    cs = ds.compiled
    ran = t[:, 2] != 0
    costs = np.array([c.weight_bytes + c.act_bytes for c in cs.costs], dtype=np.int64)
    return ProfileRecord(words=cs.stream.words()[ran], sm=t[ran, 3], start_ns=t[ran, 0], end_ns=t[ran, 2],
                         wait_ns=np.maximum(t[ran, 1] - t[ran, 0], 0), opcode_names=OPCODE_NAMES,
                         simulated=False, bytes_moved=costs[ran], meta={**meta, "kernel": VARIANT_NAMES[ds.variant]},
                         operand_names=OPERAND_NAMES,
                         marks_ns=t[ran, backend.module.TIMING_MARK0:])


def collect_cuda_profile(args: argparse.Namespace) -> ProfileRecord:
    dev = torch.device("cuda")
    weights, desc = load_bench_weights(getattr(args, "model", None), getattr(args, "preset", None) or "llama-3.2-1b",
                                       torch.bfloat16, dev)
    page = int(getattr(args, "page_size", None) or 16)
    batch, prompt_len, steps = int(args.batch), int(args.prompt_len), int(args.steps)
    knobs = backend_knobs(os.environ)  # the bench's experiment knobs apply here too (engine/cuda/knobs.py)
    env_policy = str(knobs.pop("policy", DEFAULT_POLICY))
    policy = getattr(args, "policy", None) or env_policy
    per_seq = -(-(prompt_len + steps + 1) // page)
    backend = CudaBackend(weights, num_pages=per_seq * batch, page_size=page, policy=policy,
                          **knobs)  # type: ignore[arg-type]
    tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(batch)]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, weights.config.vocab_size, (prompt_len,), generator=gen).tolist() for _ in range(batch)]
    for s in range(batch):  # prefill each sequence alone
        backend.prefill(prompts[s], tables[s])
    tokens = [p[-1] for p in prompts]
    records = []
    for step in range(steps):
        backend.timing = step == steps - 1 or steps <= 3
        b = StepBatch.build([[t] for t in tokens], [prompt_len + step] * batch, tables, device=dev, page_size=page)
        if step == 0 and backend.timing:
            # Run the first timed step twice and keep the second: it then follows a launch of the same kernel, as
            # every step of the bench's loop does. After the prefill's kernels the SMs' instruction caches are cold,
            # which made layer 0 look 12-13 µs slower than in the loop (2-3 µs: docs/BENCHMARKS.md, fifteenth
            # session). A decode step rerun with the same inputs rewrites the same KV slots with the same values.
            backend.greedy(b)
        tokens = backend.greedy(b).tolist()
        if backend.timing:
            meta: dict[str, MetaValue] = {"model": desc, "backend": "cuda", "batch": batch, "prompt_len": prompt_len,
                                          "steps": steps, "step": step, "policy": policy, "num_sms": backend.num_sms,
                                          "knobs": ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))
                                          or "defaults",
                                          "gpu": torch.cuda.get_device_name()}
            records.append(record_from_timing(backend, meta))
    return concat_records(records)
