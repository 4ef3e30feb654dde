"""Fixtures shared by the GPU tests (collected, and skipped, on machines without a GPU too)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tk():
    """The compiled csrc/tk test kernels (built on first use into the extension cache)."""
    from engine.cuda_build import load_extension

    return load_extension("mk_tk_tests")
