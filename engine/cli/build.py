"""`megakernel build`: compile every CUDA extension module into the build cache (no GPU needed)."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="compile the CUDA extensions into the build cache (needs nvcc, no GPU)")
    p.add_argument("--force", action="store_true", help="rebuild even the modules already in the cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.cuda_build import build_all

    results = build_all(force=args.force)
    for r in results:
        print(f"{'cached' if r.cached else 'built'} {r.name}: {r.library}")
    if not results:
        print("no CUDA modules found (no csrc/*/*.cu declares `// compile-check: module NAME`)")
    return 0
