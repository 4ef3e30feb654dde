"""The keys of compiled CUDA modules (engine/cuda_module_keys.py): the portable key a module compiled on another
machine is found under does not depend on where the checkout lies or on include directories, and does change with any
source or header; a prebuilt module is taken instead of compiling, and one that does not import is compiled here."""
from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest

from engine import cuda_build, cuda_module_keys as keys

needs_nvcc = pytest.mark.skipif(not cuda_build.nvcc_available(), reason="nvcc not installed")
NVCC_TEXT = "nvcc: NVIDIA (R) Cuda compiler driver\nBuilt on Wed_Aug_20\nCuda compilation tools, release 13.0, V13.0.88\n"
TINY = ('// compile-check: module {name}\n#include <pybind11/pybind11.h>\n#include "tk/util.cuh"\n'
        'PYBIND11_MODULE({name}, m) {{ m.def("answer", [] {{ return 42; }}); }}\n')


def _checkout(root: Path) -> tuple[Path, Path]:
    """A checkout at `root`: csrc/tk copied from this one, and one module source beside a header of its own."""
    shutil.copytree(cuda_build.CSRC / "tk", root / "csrc" / "tk")
    (root / "csrc" / "mod").mkdir(parents=True)
    (root / "csrc" / "mod" / "own.cuh").write_text("#pragma once\n")
    src = root / "csrc" / "mod" / "mod.cu"
    src.write_text("// compile-check: module mod\nint x;\n")
    return src, root / "csrc"


def test_the_portable_key_does_not_depend_on_the_checkouts_place_or_include_dirs(tmp_path: Path) -> None:
    src_a, csrc_a = _checkout(tmp_path / "a")
    src_b, csrc_b = _checkout(tmp_path / "elsewhere" / "b")
    key_a = keys.portable_key([src_a], csrc_a, tmp_path / "a", ["-O3", "-I/x/include"], NVCC_TEXT)
    key_b = keys.portable_key([src_b], csrc_b, tmp_path / "elsewhere" / "b", ["-O3", "-I/y/include"],
                              NVCC_TEXT.replace("Wed_Aug_20", "Thu_Sep_04"))
    assert key_a == key_b
    assert keys.local_key([src_a], csrc_a, ["-O3"], NVCC_TEXT) != keys.local_key([src_b], csrc_b, ["-O3"], NVCC_TEXT)
    (csrc_b / "mod" / "own.cuh").write_text("#pragma once\n// changed\n")
    assert keys.portable_key([src_b], csrc_b, tmp_path / "elsewhere" / "b", ["-O3"], NVCC_TEXT) != key_a
    assert keys.portable_key([src_a], csrc_a, tmp_path / "a", ["-O2"], NVCC_TEXT) != key_a
    assert keys.portable_key([src_a], csrc_a, tmp_path / "a", ["-O3"], NVCC_TEXT.replace("V13.0.88", "V13.1.0")) != key_a


def test_a_prebuilt_module_is_found_only_under_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert keys.nvcc_release(NVCC_TEXT) == "Cuda compilation tools, release 13.0, V13.0.88"
    monkeypatch.delenv(keys.PREBUILT_DIR_ENV, raising=False)
    assert keys.prebuilt_library("mod", "k") is None
    monkeypatch.setenv(keys.PREBUILT_DIR_ENV, str(tmp_path))
    library = tmp_path / "mod-k" / f"mod{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert keys.prebuilt_library("mod", "k") is None
    library.parent.mkdir()
    library.write_bytes(b"")
    assert keys.prebuilt_library("mod", "k") == library and keys.prebuilt_library("mod", "other") is None


def _fake_prebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[Path, Path]:
    """A tiny module's source, and a file that is not a library where its prebuilt module would be."""
    monkeypatch.setenv("MEGAKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(keys.PREBUILT_DIR_ENV, str(tmp_path / "prebuilt"))
    src = tmp_path / "tiny.cu"
    src.write_text(TINY.format(name=name))
    key = cuda_build.module_portable_key(cuda_build.ExtensionSpec(name, (src,)), cuda_build.find_nvcc())
    library = tmp_path / "prebuilt" / f"{name}-{key}" / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"not a library")
    return src, library


@needs_nvcc
def test_compile_extension_takes_a_prebuilt_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, library = _fake_prebuilt(tmp_path, monkeypatch, "mk_prebuilt_test")
    result = cuda_build.compile_extension(cuda_build.ExtensionSpec("mk_prebuilt_test", (src,)), quiet=True)
    assert result.prebuilt and result.cached and result.library == library
    assert not (tmp_path / "cache").exists()  # nothing compiled


@needs_nvcc
@pytest.mark.slow
def test_a_prebuilt_module_that_does_not_import_is_compiled_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src, library = _fake_prebuilt(tmp_path, monkeypatch, "mk_prebuilt_bad_test")
    module = cuda_build.build_extension("mk_prebuilt_bad_test", [src])
    assert module.answer() == 42 and Path(module.__file__) != library
    assert "does not import here" in capsys.readouterr().err
