"""`megakernel demo`: the README's default job. With no --preset: chat with a real model (SmolLM2-135M-Instruct,
fetched once: engine/cli/default_model.py), streaming its answers; on an sm_90 GPU then a speed run on random
weights of the Llama-3.2-1B shape. With --preset: only the speed run, on that preset."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from engine.cli.generate import DEFAULT_MAX_TOKENS
from engine.cuda_build import cache_root
from engine.engine_config import BACKEND_NAMES, EngineConfig
from models.llama.presets import CPU_PRESET, DEFAULT_GPU_PRESET


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="default job: chat with a real model, then a speed run on random weights")
    p.add_argument("--preset", default=None,
                   help=f"only the speed run, on random weights of this preset (default run: the real model, then "
                        f"{DEFAULT_GPU_PRESET} on an sm_90 GPU)")
    p.add_argument("--cache-dir", default=None,
                   help="checkpoint directory (default: checkpoints/PRESET in the megakernel cache, "
                        "$MEGAKERNEL_CACHE_DIR or else ~/.cache/megakernel)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--backend", default=EngineConfig.backend, choices=BACKEND_NAMES)
    p.set_defaults(func=run)


def default_cache_dir() -> Path:
    """Where the demo keeps its random checkpoints: beside the compiled modules (engine/cuda_build.py)."""
    return cache_root() / "checkpoints"


CHAT_PROMPTS = ("What is the capital of France?", "Write one sentence about GPUs.")


def run(args: argparse.Namespace) -> int:
    from engine.backends import has_sm90_gpu

    gpu = has_sm90_gpu()
    if args.preset is None:
        chatted = chat_with_real_model(args)
        if chatted and not gpu:
            return 0
    return speed_run(args, args.preset or (DEFAULT_GPU_PRESET if gpu else CPU_PRESET), gpu)


def chat_with_real_model(args: argparse.Namespace) -> bool:
    """Stream the real model's answers to CHAT_PROMPTS; False (with one line why) where it cannot be had."""
    from engine import LLM
    from engine.cli.default_model import SMOLLM2_135M_INSTRUCT, ModelUnavailable, ensure_model

    try:
        model_dir = ensure_model(SMOLLM2_135M_INSTRUCT, cache_root() / "models")
    except ModelUnavailable as exc:
        print(f"no real model for the demo ({exc}); random weights instead")
        return False
    try:
        llm = LLM(str(model_dir), backend=args.backend, progress=False)
    except (RuntimeError, ValueError) as exc:  # e.g. a shape the megakernel refuses: the reference runs it
        print(f"{SMOLLM2_135M_INSTRUCT.name} on backend {args.backend!r}: {exc}; using the torch backend")
        llm = LLM(str(model_dir), backend="torch", progress=False)
    print(f"{SMOLLM2_135M_INSTRUCT.name} on the {llm.engine.backend_name} backend ({llm.engine.choice.reason})")
    try:
        for question in CHAT_PROMPTS:
            stream_answer(llm, question, args.max_tokens * 2)
    except (RuntimeError, ValueError) as exc:
        if llm.engine.backend_name == "torch":
            raise
        print(f"\nthe {llm.engine.backend_name} backend failed ({' '.join(str(exc).split())[:200]}); "
              f"the torch backend answers instead")
        llm = LLM(str(model_dir), backend="torch", progress=False)
        for question in CHAT_PROMPTS:
            stream_answer(llm, question, args.max_tokens * 2)
    return True


def stream_answer(llm: object, question: str, max_tokens: int) -> None:
    """One chat turn, its text printed as the engine produces it, then tokens and tok/s."""
    from engine import SamplingParams

    engine = llm.engine  # type: ignore[attr-defined]
    ids = engine.apply_chat_template([{"role": "user", "content": question}])
    request_id = f"demo-{abs(hash(question))}"
    engine.add_request(request_id, {"prompt_token_ids": ids}, SamplingParams(max_tokens=max_tokens, temperature=0.0))
    print(f"> {question}\n", end="", flush=True)
    shown, tokens, start = "", 0, time.perf_counter()
    while engine.has_unfinished_requests():
        for out in engine.step():
            text = out.outputs[0].text
            print(text[len(shown):], end="", flush=True)
            shown, tokens = text, len(out.outputs[0].token_ids)
    elapsed = time.perf_counter() - start
    print(f"\n[{tokens} tokens in {elapsed:.2f}s = {tokens / elapsed:.1f} tok/s]")


def speed_run(args: argparse.Namespace, preset: str, gpu: bool) -> int:
    """Random weights of `preset`: generate with two prompts and time it."""
    from engine import LLM, SamplingParams
    from models.llama.init_random import init_random_checkpoint

    if not gpu and args.preset is None:
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
          f"= {total / elapsed:.1f} tok/s (batch {len(prompts)}, greedy, random weights: the text is noise)")
    return 0
