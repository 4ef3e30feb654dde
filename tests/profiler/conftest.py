"""Fixtures: fresh RNG per test and a random synthetic record (see synthetic_profiles.py)."""
from __future__ import annotations

import numpy as np
import pytest
from synthetic_profiles import make_record

from profiler.record import ProfileRecord


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


@pytest.fixture
def record(rng: np.random.Generator) -> ProfileRecord:
    return make_record(rng)
