"""Lab: where a tensor-parallel decode step's time goes. A preset's config served by LLM(tensor_parallel_size=N,
load_format="dummy") on the cuda backend (each rank makes its random shard) with the kernel's timing records on every
rank; rank 0's last decode step summarised (per opcode, per-layer phases), and saved with --npz for the profiler.
  python -m dev.tp_profile --preset llama-3.1-8b --tp 2 [--npz PATH] [--kernel-option NAME=VALUE ...]"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from engine import LLM, SamplingParams
from engine.bench.generate_runner import write_config
from engine.cuda.profile import record_from_timing
from models.llama.presets import preset_config
from profiler.phases import layer_phases, render_phases
from profiler.record import save_npz
from profiler.summary import render_text, summarize


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="llama-3.1-8b")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--kernel-option", action="append", default=[])
    p.add_argument("--npz", default=None, help="also save rank 0's record here (profiler/record.py save_npz)")
    a = p.parse_args()
    desc = f"{a.preset} (random weights)"
    with tempfile.TemporaryDirectory(prefix="tp-profile-") as d:
        write_config(preset_config(a.preset), torch.bfloat16, Path(d))
        llm = LLM(d, backend="cuda", dtype="bfloat16", progress=False, max_num_seqs=1, max_model_len=256,
                  tensor_parallel_size=a.tp, kernel_options=tuple(a.kernel_option), load_format="dummy")
    try:
        backend = llm.engine.backend
        prompt = {"prompt_token_ids": list(range(100, 132))}
        params = SamplingParams(temperature=0, max_tokens=a.steps, ignore_eos=True)
        llm.generate(prompt, params)  # streams compiled
        backend.timing = True
        llm.generate(prompt, params)
        rank0 = backend.rank0
        record = record_from_timing(rank0.last, int(rank0.module.TIMING_MARK0),
                                    {"model": desc, "backend": "cuda", "tp": a.tp})
        print(f"== {desc}, rank 0 of {a.tp}: the last decode step")
        print(render_text(summarize(record)))
        print("\n".join(render_phases(layer_phases(record))))
        if a.npz:
            save_npz(record, a.npz)
    finally:
        llm.close()


if __name__ == "__main__":
    main()
