"""What identifies a compiled CUDA module (engine/cuda_build.py): the local cache key, and a portable key under which
a module compiled on another machine is found here (``$MEGAKERNEL_PREBUILT_DIR/<name>-<portable key>/``).

Why a portable key: a GPU machine's run spends two to three minutes of its short, metered device time compiling the
interpreter (eight kernel instantiations), though nvcc makes the same code on a CPU machine with the same nvcc
release for the same Python minor version (the modules link libcudart statically; dev/prebuild_modules.sh). The local
key hashes absolute paths, include directories and the whole ``sys.version``, so it never matches across machines;
the portable one hashes what decides the module: each source's and header's path inside the checkout and its content,
the flags other than include directories, nvcc's release line, the Python minor version and extension suffix.
"""
from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

PREBUILT_DIR_ENV = "MEGAKERNEL_PREBUILT_DIR"


def module_files(sources: Sequence[Path], csrc: Path) -> list[Path]:
    """The sources, then the headers a module can include: its own directories' and the shared tile layer's (not all
    of csrc, so that editing one module's headers does not rebuild the others)."""
    dirs = sorted({s.resolve().parent for s in sources} | {(csrc / "tk").resolve()})
    headers = sorted({p for d in dirs for ext in ("*.cuh", "*.h", "*.hpp") for p in d.rglob(ext)})
    return [*sources, *headers]


def _digest(files: Iterable[tuple[str, Path]], parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for name, path in files:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:20]


def local_key(sources: Sequence[Path], csrc: Path, flags: Sequence[str], nvcc_version: str) -> str:
    """This machine's cache key: every file by its absolute path, every flag, nvcc's whole version text, Python's."""
    files = [(str(p.resolve()), p) for p in module_files(sources, csrc)]
    return _digest(files, [*flags, nvcc_version, sys.version, str(sysconfig.get_config_var("EXT_SUFFIX"))])


def nvcc_release(nvcc_version: str) -> str:
    """The release line of `nvcc --version` ("Cuda compilation tools, release 13.0, V13.0.88"), without build dates."""
    return next((line.strip() for line in nvcc_version.splitlines() if "release" in line), nvcc_version.strip())


def portable_key(sources: Sequence[Path], csrc: Path, root: Path, flags: Sequence[str], nvcc_version: str) -> str:
    """The key a module compiled elsewhere is kept under: files by their path inside `root` (the checkout), `flags`
    without include directories, nvcc's release, Python's minor version and extension suffix."""
    def name(p: Path) -> str:
        resolved = p.resolve()
        return str(resolved.relative_to(root.resolve())) if resolved.is_relative_to(root.resolve()) else p.name

    files = [(name(p), p) for p in module_files(sources, csrc)]
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return _digest(files, [*(f for f in flags if not f.startswith("-I")), nvcc_release(nvcc_version), python,
                           str(sysconfig.get_config_var("EXT_SUFFIX"))])


def prebuilt_dir() -> Path | None:
    """$MEGAKERNEL_PREBUILT_DIR (absolute), or None where it is not set: the one place it is read."""
    root = os.environ.get(PREBUILT_DIR_ENV)
    return Path(root).resolve() if root else None


def prebuilt_library(name: str, key: str) -> Path | None:
    """Module `name` compiled elsewhere under `key` in $MEGAKERNEL_PREBUILT_DIR, if that is set and holds it."""
    root = prebuilt_dir()
    if root is None:
        return None
    library = root / f"{name}-{key}" / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    return library if library.is_file() else None
