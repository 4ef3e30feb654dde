"""Bench test fixtures: one intra-op thread (these tensors are tiny; on a loaded 2-core CI box
OpenMP spinning made a 1 ms step take 100 ms) and random tiny weights."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # reference_decode helper

from models.llama.presets import preset_config  # noqa: E402
from models.llama.weights import LlamaWeights  # noqa: E402

from engine.bench.model_source import random_weights  # noqa: E402


@pytest.fixture(autouse=True)
def single_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def seed() -> int:
    return int(torch.randint(0, 2**31 - 1, ()).item())


@pytest.fixture
def tiny_weights(seed: int) -> LlamaWeights:
    return random_weights(preset_config("tiny"), torch.float32, torch.device("cpu"), seed)
