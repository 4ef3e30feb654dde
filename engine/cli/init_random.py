"""`megakernel init-random`: write a random checkpoint of a preset in Hugging Face layout."""
from __future__ import annotations

import argparse

from models.llama.init_random import DEFAULT_DTYPE, DEFAULT_SEED, DTYPES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init-random", help="write a random checkpoint of a preset in Hugging Face layout")
    p.add_argument("--preset", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--dtype", default=DEFAULT_DTYPE, choices=sorted(DTYPES))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.llama.init_random import init_random_checkpoint

    out = init_random_checkpoint(args.preset, args.out, seed=args.seed, dtype=args.dtype)
    print(f"wrote a random {args.preset} checkpoint to {out}")
    return 0
