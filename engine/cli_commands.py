"""Core subcommands: init-random, generate, demo (the README's default job) and build."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init-random", help="write a random checkpoint of a preset in Hugging Face layout")
    p.add_argument("--preset", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.set_defaults(func=_init_random)

    p = sub.add_parser("generate", help="generate text from a checkpoint directory")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", action="append", required=True, help="repeatable")
    _add_engine_args(p)
    _add_sampling_args(p)
    p.add_argument("--chat", action="store_true", help="wrap each prompt as a user chat message")
    p.set_defaults(func=_generate)

    p = sub.add_parser("demo", help="default job: random model of a preset, generate and time it")
    p.add_argument("--preset", default=None, help="default: llama-3.2-1b on an sm_90 GPU, tiny on the CPU")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--backend", default="auto")
    p.set_defaults(func=_demo)

    p = sub.add_parser("build", help="compile the CUDA extensions into the build cache")
    p.set_defaults(func=_build)


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "vm", "cuda"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--ignore-eos", action="store_true")


def _init_random(args: argparse.Namespace) -> int:
    from models.llama.init_random import init_random_checkpoint
    out = init_random_checkpoint(args.preset, args.out, seed=args.seed, dtype=args.dtype)
    print(f"wrote a random {args.preset} checkpoint to {out}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from engine import LLM, SamplingParams
    llm = LLM(args.model, backend=args.backend, dtype=args.dtype, max_model_len=args.max_model_len,
              seed=args.seed)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, ignore_eos=args.ignore_eos)
    start = time.perf_counter()
    if args.chat:
        outs = llm.chat([[{"role": "user", "content": p}] for p in args.prompt], params)
    else:
        outs = llm.generate(args.prompt, params)
    elapsed = time.perf_counter() - start
    n_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    for out in outs:
        print(f"--- {out.request_id} ({out.outputs[0].finish_reason}): {out.outputs[0].text!r}")
    print(f"[{llm.engine.backend_name}] {n_tokens} tokens in {elapsed:.2f}s ({n_tokens / elapsed:.1f} tok/s)")
    return 0


def _default_cache_dir() -> Path:
    root = os.environ.get("MEGAKERNEL_CACHE", os.path.join(Path.home(), ".cache", "megakernel"))
    return Path(root) / "checkpoints"


def _demo(args: argparse.Namespace) -> int:
    from engine import LLM, SamplingParams
    from engine.backends import has_sm90_gpu
    from models.llama.init_random import init_random_checkpoint

    gpu = has_sm90_gpu()
    preset = args.preset or ("llama-3.2-1b" if gpu else "tiny")
    if not gpu:
        print("no sm_90 GPU found: running the CPU reference backend on the tiny preset")
    model_dir = Path(args.cache_dir) if args.cache_dir else _default_cache_dir() / preset
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


def _build(args: argparse.Namespace) -> int:
    from engine.cuda_build import build_all
    for name, path in build_all():
        print(f"built {name}: {path}")
    return 0
