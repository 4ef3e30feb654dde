"""The tile layer's GPU test kernels (collected, and skipped, on machines without a GPU too)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tk():
    """The compiled test module of csrc/tk (tests/tk/csrc, built on first use into the extension cache)."""
    from engine.cuda_build import load_extension

    return load_extension("mk_tk_tests")
