"""Compile every CUDA module on this machine and copy each into DEST/<name>-<portable key>/, where engine/cuda_build.py
finds it on another machine with MEGAKERNEL_PREBUILT_DIR=DEST (engine/cuda_module_keys.py). Run under the other
machine's Python minor version with the same nvcc release: dev/prebuild_modules.sh does, for the GPU machines.
Usage: python -m dev.prebuild_modules DEST"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from engine.cuda_build import build_all, discover_extensions, find_nvcc, module_portable_key


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dev.prebuild_modules DEST", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    specs = {s.name: s for s in discover_extensions()}
    nvcc = find_nvcc()
    kept = set()
    for result in build_all(check_import=False):
        out = dest / f"{result.name}-{module_portable_key(specs[result.name], nvcc)}"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(result.library, out / result.library.name)
        if result.log.is_file():
            shutil.copy2(result.log, out / "build.log")
        kept.add(out.name)
        print(f"prebuilt {result.name} -> {out}")
    for stale in dest.iterdir():  # earlier sources' modules: only the current ones travel
        if stale.is_dir() and stale.name not in kept:
            shutil.rmtree(stale)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
