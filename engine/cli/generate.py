"""`megakernel generate`: generate text from a checkpoint directory."""
from __future__ import annotations

import argparse
import time

from engine.cli.engine_flags import add_engine_flags, engine_kwargs
from engine.sampling_params import SamplingParams

# The command's own defaults: a couple of lines of text, greedy (LLM and SamplingParams default to 16 tokens
# sampled at temperature 1, as vLLM's do).
DEFAULT_MAX_TOKENS = 32
DEFAULT_TEMPERATURE = 0.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate text from a checkpoint directory")
    add_engine_flags(p)
    p.add_argument("--prompt", action="append", required=True, help="repeatable")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE)
    p.add_argument("--top-p", type=float, default=SamplingParams.top_p)
    p.add_argument("--top-k", type=int, default=SamplingParams.top_k)
    p.add_argument("--min-tokens", type=int, default=SamplingParams.min_tokens,
                   help="tokens to generate before EOS or a stop id may end a prompt's output")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--chat", action="store_true", help="wrap each prompt as a user chat message")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine import LLM
    from models.llama.config import LlamaConfig
    from models.llama.weights import check_checkpoint

    # A bad sampling flag fails first, before anything loads.
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_tokens=args.min_tokens, ignore_eos=args.ignore_eos)
    # A bad checkpoint fails here, from config.json and the safetensors headers, in milliseconds:
    # before the tokenizer, the backend and the weights are loaded.
    config = LlamaConfig.from_dir(args.model)
    if args.load_format == "auto":
        check_checkpoint(args.model, config)
    llm = LLM(args.model, **engine_kwargs(args))
    try:  # closed: a tensor-parallel engine's ranks end with it
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
    finally:
        llm.close()
    return 0
