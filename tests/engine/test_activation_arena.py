"""The cuda backend's shared activation buffers (engine/cuda/activation_arena.py), on the CPU."""
from __future__ import annotations

import torch

from engine.cuda.activation_arena import ActivationArena


def test_streams_share_one_buffer_per_name_and_a_larger_one_grows_it() -> None:
    arena = ActivationArena(torch.device("cpu"))
    a = arena.view("hidden", (4, 8), torch.float32)
    b = arena.view("hidden", (2, 8), torch.float32)
    assert a.data_ptr() == b.data_ptr() and arena.nbytes() == 4 * 8 * 4
    c = arena.view("hidden", (16, 8), torch.float32)  # a larger stream: a new buffer ...
    assert c.shape == (16, 8) and arena.nbytes() == 16 * 8 * 4
    a.fill_(1.0)
    assert a.sum().item() == 32  # ... while the older streams keep theirs
    d = arena.view("x_bf16", (3, 8), torch.bfloat16)
    assert d.dtype == torch.bfloat16 and d.data_ptr() != c.data_ptr()
