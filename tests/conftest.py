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


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = _gpu_available()
    skip_gpu = pytest.mark.skip(reason="needs an sm_90 GPU (none here)")
    skip_multi = pytest.mark.skip(reason="needs two or more sm_90 GPUs")
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip_gpu)
        elif "multigpu" in item.keywords and (not gpu or _gpu_count() < 2):
            item.add_marker(skip_multi)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random checkpoint of the `tiny` preset, written once per test session (fp32 weights)."""
    from models.llama.init_random import init_random_checkpoint

    out = tmp_path_factory.mktemp("tiny_ckpt")
    init_random_checkpoint("tiny", out, seed=1234, dtype="float32", progress=False)
    return str(out)
