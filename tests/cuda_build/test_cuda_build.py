"""CPU tests of engine.cuda_build (no GPU needed: compiling and importing need only nvcc)."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine import cuda_build
from engine.ptxas_report import format_report, parse_ptxas

needs_nvcc = pytest.mark.skipif(not cuda_build.nvcc_available(), reason="nvcc not installed")


def test_discovers_the_product_and_the_tk_test_module() -> None:
    specs = {s.name: s for s in cuda_build.discover_extensions()}
    assert "mk_interpreter" in specs and "mk_tk_tests" in specs
    tk_tests = specs["mk_tk_tests"].sources
    assert {p.name for p in tk_tests} == {"module.cu", "sync_tests.cu", "tma_tests.cu", "tile_tests.cu", "math_tests.cu"}
    assert all(p.parent == cuda_build.ROOT / "tests" / "tk" / "csrc" for p in tk_tests)


def test_discovery_groups_by_marker(tmp_path: Path) -> None:
    for rel, text in [("csrc/a/x.cu", "// compile-check: module foo\nint x;\n"),
                      ("csrc/a/y.cu", "// compile-check: module foo\nint y;\n"),
                      ("csrc/a/z.cu", "// no marker\n"),
                      ("tests/b/csrc/t.cu", "// compile-check: module foo_tests\nint t;\n"),
                      ("tests/b/u.cu", "// compile-check: module stray\n")]:  # not in a csrc folder: not a module
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    specs = cuda_build.discover_extensions(tmp_path)
    assert [(s.name, [p.name for p in s.sources]) for s in specs] == [("foo", ["x.cu", "y.cu"]),
                                                                      ("foo_tests", ["t.cu"])]


def test_parse_ptxas() -> None:
    log = """ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'
ptxas info    : Function properties for _Z3fooPf
    32 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 16 bytes smem
ptxas info    : Compiling entry function '_Z3barv' for 'sm_90a'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers
"""
    ks = parse_ptxas(log)
    assert [(k.kernel, k.registers, k.stack_bytes, k.spills) for k in ks] == [
        ("_Z3fooPf", 168, 32, True), ("_Z3barv", 12, 0, False)]
    assert "SPILLS" in format_report(ks)


def test_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(cuda_build.CudaBuildError, match="missing sources"):
        cuda_build.compile_extension(cuda_build.ExtensionSpec("nope", (tmp_path / "none.cu",)))


@needs_nvcc
def test_compile_error_names_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEGAKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    bad = tmp_path / "bad.cu"
    bad.write_text("this is not C++;\n")
    with pytest.raises(cuda_build.CudaBuildError, match=r"build\.log") as info:
        cuda_build.compile_extension(cuda_build.ExtensionSpec("bad_mod", (bad,)), quiet=True)
    assert "bad.cu" in str(info.value)


@needs_nvcc
@pytest.mark.slow
def test_build_import_and_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEGAKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "tiny.cu"
    src.write_text('#include <pybind11/pybind11.h>\n#include "tk/util.cuh"\n'
                   "__global__ void k(int* p) { p[0] = mk::tk::lane_id(); }\n"
                   "PYBIND11_MODULE(mk_tiny_build_test, m) { m.def(\"answer\", [] { return 42; }); }\n")
    spec = cuda_build.ExtensionSpec("mk_tiny_build_test", (src,))
    first = cuda_build.compile_extension(spec, quiet=True)
    assert not first.cached and first.library.is_file()
    assert any(k.registers > 0 for k in parse_ptxas(first.log.read_text()))
    assert cuda_build.compile_extension(spec, quiet=True).cached
    assert cuda_build.import_extension(first).answer() == 42
    src.write_text(src.read_text() + "// changed\n")
    assert cuda_build.build_dir(spec) != first.library.parent  # content-keyed
