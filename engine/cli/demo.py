"""`megakernel demo`: the README's default job — a random model of a preset, generate and time it."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from engine.cli.generate import DEFAULT_MAX_TOKENS
from engine.cuda_build import cache_root
from engine.engine_config import BACKEND_NAMES, EngineConfig
from models.llama.presets import CPU_PRESET, DEFAULT_GPU_PRESET


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="default job: random model of a preset, generate and time it")
    p.add_argument("--preset", default=None,
                   help=f"default: {DEFAULT_GPU_PRESET} on an sm_90 GPU, {CPU_PRESET} on the CPU")
    p.add_argument("--cache-dir", default=None,
                   help="checkpoint directory (default: checkpoints/PRESET in the megakernel cache, "
                        "$MEGAKERNEL_CACHE_DIR or else ~/.cache/megakernel)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--backend", default=EngineConfig.backend, choices=BACKEND_NAMES)
    p.set_defaults(func=run)


def default_cache_dir() -> Path:
    """Where the demo keeps its random checkpoints: beside the compiled modules (engine/cuda_build.py)."""
    return cache_root() / "checkpoints"


def run(args: argparse.Namespace) -> int:
    from engine import LLM, SamplingParams
    from engine.backends import has_sm90_gpu
    from models.llama.init_random import init_random_checkpoint

    gpu = has_sm90_gpu()
    preset = args.preset or (DEFAULT_GPU_PRESET if gpu else CPU_PRESET)
    if not gpu:
        print("no sm_90 GPU found: running the CPU reference backend on the tiny preset")
    model_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir() / preset
    if not (model_dir / "config.json").exists():
        print(f"writing a random {preset} checkpoint to {model_dir}")
        init_random_checkpoint(preset, str(model_dir), seed=0)
    llm = LLM(str(model_dir), backend=args.backend)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    prompts = ["The megakernel runs every layer in one launch", "Paged attention keeps"]
    llm.generate(prompts[:1], SamplingParams(max_tokens=2, temperature=0.0))  # warm-up
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    for out in outs:
        print(f"prompt {out.prompt!r} -> {len(out.outputs[0].token_ids)} tokens: {out.outputs[0].text[:80]!r}")
    total = sum(len(o.outputs[0].token_ids) for o in outs)
    print(f"backend={llm.engine.backend_name} preset={preset}: {total} tokens in {elapsed:.2f}s "
          f"= {total / elapsed:.1f} tok/s (batch {len(prompts)}, greedy, random weights)")
    return 0
