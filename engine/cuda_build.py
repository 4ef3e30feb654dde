"""Build the CUDA extension modules (pybind11 + nvcc + ninja) into a content-addressed cache.

A module is compiled once per distinct (sources, headers beside them and in csrc/tk, flags, nvcc
version, Python ABI) into ``$MEGAKERNEL_CACHE_DIR`` (default ``~/.cache/megakernel``)/``<name>-<hash>/`` and imported from
there. No GPU and no driver library are needed to build: modules link only libcudart (driver entry
points such as ``cuTensorMapEncodeTiled`` are fetched at run time), so CI compiles them on CPU machines.

Modules are discovered from a marker line in their ``.cu`` files under ``csrc/*/`` (the product's) and
``tests/*/csrc/`` (test modules kept beside their tests, e.g. the tile layer's GPU test kernels)::

    // compile-check: module NAME

All files carrying the same NAME are linked into one module, whose ``PYBIND11_MODULE`` must be NAME.
A module may include headers from its own directory and from csrc (``tk/...``); only its own directory's
and csrc/tk's headers are hashed (engine/cuda_module_keys.py). With ``$MEGAKERNEL_PREBUILT_DIR`` set, a module
compiled on another machine for this one (dev/prebuild_modules.sh) is taken from there instead of compiling it.
"""
from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from engine.cuda_module_keys import local_key, portable_key, prebuilt_dir, prebuilt_library

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
MODULE_SOURCES = ("csrc/*/*.cu", "tests/*/csrc/*.cu")  # relative to the repository root
BASE_FLAGS: tuple[str, ...] = (
    "-std=c++20",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-O3",
    "--expt-relaxed-constexpr",
    "-lineinfo",  # source lines for compute-sanitizer / profilers; no runtime cost
    "-Xptxas=-v",  # registers / spills per kernel, kept in the build log
    "-Xcompiler=-fPIC",
    "-Xcompiler=-fvisibility=hidden",  # pybind11's recommendation for extension modules
)
_MARKER = re.compile(r"^//\s*compile-check:\s*module\s+([A-Za-z_][A-Za-z0-9_]*)\s*$", re.M)


class CudaBuildError(RuntimeError):
    """A CUDA module failed to compile, link or import; the message names the log file."""


@dataclass(frozen=True)
class ExtensionSpec:
    name: str
    sources: tuple[Path, ...]
    extra_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildResult:
    name: str
    library: Path
    log: Path
    cached: bool
    prebuilt: bool = False  # taken from $MEGAKERNEL_PREBUILT_DIR


def find_nvcc() -> Path:
    candidates = [os.environ.get("MEGAKERNEL_NVCC"), shutil.which("nvcc")]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidates.append(str(Path(cuda_home) / "bin" / "nvcc"))
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    raise CudaBuildError("nvcc not found: install the CUDA toolkit (12.8+), put nvcc on PATH or "
                         "set CUDA_HOME / MEGAKERNEL_NVCC")


def nvcc_available() -> bool:
    """Whether find_nvcc finds a compiler (tests that only need nvcc skip without one)."""
    try:
        find_nvcc()
    except CudaBuildError:
        return False
    return True


def find_ninja() -> Path:
    found = shutil.which("ninja")
    if found:
        return Path(found)
    try:
        import ninja  # the PyPI wheel ships the binary
    except ImportError as exc:
        raise CudaBuildError("ninja not found: `pip install ninja`") from exc
    return Path(ninja.BIN_DIR) / "ninja"


CACHE_DIR_ENV = "MEGAKERNEL_CACHE_DIR"


def cache_root() -> Path:
    """The megakernel's cache: the compiled modules here, the demo's random checkpoints under checkpoints/.
    The one place the cache's environment variable is read."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "megakernel")


def discover_extensions(root: Path = ROOT) -> tuple[ExtensionSpec, ...]:
    """Every module marked with ``// compile-check: module NAME`` in a MODULE_SOURCES file under ``root``."""
    by_name: dict[str, list[Path]] = {}
    for pattern in MODULE_SOURCES:
        for cu in sorted(root.glob(pattern)):
            for name in _MARKER.findall(cu.read_text()):
                by_name.setdefault(name, []).append(cu)
    return tuple(ExtensionSpec(n, tuple(srcs)) for n, srcs in sorted(by_name.items()))


def _nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _pybind11_include() -> str:
    try:
        import pybind11

        return pybind11.get_include()
    except ImportError:  # images without the pybind11 package: torch bundles the same headers
        try:
            import torch
        except ImportError as exc:
            raise CudaBuildError("pybind11 headers not found: `pip install pybind11`") from exc
        bundled = Path(torch.__file__).parent / "include"
        if not (bundled / "pybind11" / "pybind11.h").is_file():
            raise CudaBuildError("pybind11 headers not found: `pip install pybind11`")
        return str(bundled)


def _include_dirs() -> list[str]:
    return [str(CSRC), _pybind11_include(), sysconfig.get_paths()["include"]]


def module_portable_key(spec: ExtensionSpec, nvcc: Path) -> str:
    """The key `spec` compiled here is kept under for another machine (engine/cuda_module_keys.py)."""
    return portable_key(spec.sources, CSRC, ROOT, _flags(spec), _nvcc_version(nvcc))


def _flags(spec: ExtensionSpec) -> list[str]:
    return [*BASE_FLAGS, *(f"-I{d}" for d in _include_dirs()), *spec.extra_flags]


def build_dir(spec: ExtensionSpec) -> Path:
    """The cache directory for ``spec``: changes whenever a source, header, flag or tool changes."""
    nvcc = find_nvcc()
    return cache_root() / f"{spec.name}-{local_key(spec.sources, CSRC, _flags(spec), _nvcc_version(nvcc))}"


def _ninja_file(spec: ExtensionSpec, nvcc: Path, flags: list[str], library: str) -> str:
    def esc(s: str) -> str:
        return s.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")

    lines = [
        "ninja_required_version = 1.3",
        f"nvcc = {esc(str(nvcc))}",
        "cflags = " + " ".join(flags),
        "rule cuda_compile",
        "  command = $nvcc $cflags -MD -MF $out.d -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = NVCC $in",
        "rule link",
        "  command = $nvcc -shared $in -o $out",
        "  description = LINK $out",
    ]
    objects = []
    for i, src in enumerate(spec.sources):
        obj = f"{i:02d}_{src.stem}.o"
        objects.append(obj)
        lines.append(f"build {obj}: cuda_compile {esc(str(src.resolve()))}")
    lines += [f"build {library}: link {' '.join(objects)}", f"default {library}", ""]
    return "\n".join(lines)


def compile_extension(spec: ExtensionSpec, *, force: bool = False, quiet: bool = False,
                      use_prebuilt: bool = True) -> BuildResult:
    """Compile (or find cached, or prebuilt: $MEGAKERNEL_PREBUILT_DIR) the shared library for ``spec``; does not
    import it."""
    missing = [str(s) for s in spec.sources if not s.is_file()]
    if not spec.sources or missing:
        raise CudaBuildError(f"module {spec.name}: missing sources {missing or '(none given)'}")
    nvcc = find_nvcc()
    prebuilt = None
    if use_prebuilt and not force and prebuilt_dir() is not None:  # the key reads every file: only when asked
        prebuilt = prebuilt_library(spec.name, module_portable_key(spec, nvcc))
    if prebuilt is not None:
        return BuildResult(spec.name, prebuilt, prebuilt.parent / "build.log", cached=True, prebuilt=True)
    flags = _flags(spec)
    out_dir = build_dir(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / f"{spec.name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    log = out_dir / "build.log"
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent builders of the same key wait for the first
        if library.is_file() and not force:
            return BuildResult(spec.name, library, log, cached=True)
        if not quiet:
            print(f"megakernel: compiling CUDA module {spec.name} (first use; about a minute) "
                  f"into {out_dir}", file=sys.stderr, flush=True)
        (out_dir / "build.ninja").write_text(_ninja_file(spec, nvcc, flags, library.name))
        if force:
            for stale in [library, *out_dir.glob("*.o")]:
                stale.unlink(missing_ok=True)
        cmd = [str(find_ninja()), "-C", str(out_dir), "-j", str(os.cpu_count() or 1)]
        with open(log, "w") as log_file:
            proc = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0 or not library.is_file():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise CudaBuildError(f"building CUDA module {spec.name} failed (exit {proc.returncode}); "
                                 f"full compiler log: {log}\n{tail}")
    return BuildResult(spec.name, library, log, cached=False)


def import_extension(result: BuildResult) -> ModuleType:
    loaded = sys.modules.get(result.name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == result.library:
        return loaded  # re-running a pybind11 module's init in one process is not supported
    spec = importlib.util.spec_from_file_location(result.name, result.library)
    if spec is None or spec.loader is None:
        raise CudaBuildError(f"cannot import {result.library}")
    try:
        module = importlib.util.module_from_spec(spec)  # dlopen: a library that is not one fails here
        spec.loader.exec_module(module)
    except ImportError as exc:  # e.g. an undefined symbol the linker let through
        raise CudaBuildError(f"importing CUDA module {result.name} from {result.library} failed: "
                             f"{exc} (build log: {result.log})") from exc
    sys.modules[result.name] = module
    return module


def _import_or_rebuild(spec: ExtensionSpec, result: BuildResult) -> tuple[ModuleType, BuildResult]:
    """Import `result`; a prebuilt module that does not import here (another machine's toolchain) is compiled here.
    The module and the build it came from."""
    try:
        return import_extension(result), result
    except CudaBuildError as exc:
        if not result.prebuilt:
            raise
        print(f"megakernel: the prebuilt {spec.name} does not import here ({exc}); compiling it", file=sys.stderr,
              flush=True)
        rebuilt = compile_extension(spec, use_prebuilt=False)
        return import_extension(rebuilt), rebuilt


def build_extension(name: str, sources: list[Path] | tuple[Path, ...],
                    extra_flags: list[str] | tuple[str, ...] = ()) -> ModuleType:
    """Compile (cached) and import the pybind11 module ``name`` built from ``sources``."""
    spec = ExtensionSpec(name, tuple(Path(s) for s in sources), tuple(extra_flags))
    return _import_or_rebuild(spec, compile_extension(spec))[0]


def load_extension(name: str) -> ModuleType:
    """Compile (cached) and import a module discovered (MODULE_SOURCES) by its marker name."""
    for spec in discover_extensions():
        if spec.name == name:
            return _import_or_rebuild(spec, compile_extension(spec))[0]
    raise CudaBuildError(f"no {' or '.join(MODULE_SOURCES)} file declares `// compile-check: module {name}`")


def build_all(*, force: bool = False, check_import: bool = True) -> list[BuildResult]:
    """Compile every discovered module (``megakernel build``); import each to catch link errors."""
    results = []
    for spec in discover_extensions():
        result = compile_extension(spec, force=force)
        if check_import:
            result = _import_or_rebuild(spec, result)[1]
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    from engine.ptxas_report import format_report, parse_ptxas

    parser = argparse.ArgumentParser(description="Compile every CUDA module (csrc, and the test modules under tests).")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--no-import", action="store_true", help="skip the import check")
    args = parser.parse_args(argv)
    try:
        results = build_all(force=args.force, check_import=not args.no_import)
    except CudaBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for r in results:
        how = "prebuilt" if r.prebuilt else "cached" if r.cached else "built"
        print(f"{r.name}: {r.library} ({how}; log {r.log})")
        if r.log.is_file():
            print(format_report(parse_ptxas(r.log.read_text(errors="replace"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
