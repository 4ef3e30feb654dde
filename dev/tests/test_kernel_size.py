"""dev/kernel_size.sh: one interpreter instantiation's code size with nvcc alone (no GPU)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from engine import cuda_build

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not cuda_build.nvcc_available(), reason="nvcc not installed")
def test_kernel_size_reports_the_batch1_variant_and_its_functions() -> None:
    """dev/kernel_size.sh (one interpreter instantiation's code size, no GPU) keeps compiling the kernel part of
    interpreter.cu on its own and reports the batch-1 variant's size, its not-inlined functions and ptxas' line."""
    out = subprocess.run(["bash", str(ROOT / "dev" / "kernel_size.sh"), str(ROOT), "2"], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    kernel = re.search(r"^\s*(\d+) B  kernel _ZN2mk2vm10megakernelILb0ELi2E", out, re.M)
    assert kernel is not None, out
    size = int(kernel.group(1))
    assert 100_000 < size < 400_000, out  # the fused batch-1 variant: about 237 KB
    assert "consume_pages<1, (mk::vm::PagePath)1>" in out  # the one-row tensor-core page loop (ONE_ROW_MMA), not inlined
    assert re.search(r"ptxas: kernel \d+ registers, \d+ bytes stack frame, \d+ bytes spill stores", out), out
