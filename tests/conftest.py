"""Shared pytest fixtures and the `gpu` marker's skip logic."""
from __future__ import annotations

import pytest


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    major, _minor = torch.cuda.get_device_capability()
    return major == 9


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _gpu_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs an sm_90 GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
