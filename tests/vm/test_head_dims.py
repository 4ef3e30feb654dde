"""Every head dim of Llama-architecture checkpoints in use (64, 80, 96, 100, 128, 256) runs on the VM, stored as the
kernel's head widths (engine/instructions/head_padding.py: 80, 96, 100 zero-padded), and matches the fp32 reference:
prefill, decode, split-KV and the fused attention + O-projection path, with races checked."""
from __future__ import annotations

import pytest

from engine.instructions.head_padding import stored_head_dim
from engine.instructions.layout import ModelDims
from tests.vm.helpers import random_weights, run_pair, small_config

HEAD_DIMS = (64, 80, 96, 100, 128, 256)


@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_prefill_then_decode_with_kv_splits(hd: int) -> None:
    cfg = small_config(hidden=64, heads=4, kv_heads=2, head_dim=hd, inter=96)
    d = ModelDims.from_config(cfg)
    assert (d.head_dim, d.model_head_dim) == (stored_head_dim(hd), hd)
    w = random_weights(cfg, seed=hd)
    run_pair(cfg, w, [[None, None], [3, 1], [1, 1], [1, 1]], prompt_lens=[21, 12], num_sms=16,
             min_pages_per_split=1)


@pytest.mark.parametrize("hd", (80, 100, 256))
def test_fused_attention_o_proj(hd: int) -> None:
    """Batch-1 decode through ATTN_O_PROJ: its W_o columns are the stored (padded) ones."""
    cfg = small_config(hidden=64, heads=4, kv_heads=1, head_dim=hd, inter=96)
    w = random_weights(cfg, seed=hd + 1)
    fused: list[bool] = []
    run_pair(cfg, w, [[None]] + [[1]] * 3, prompt_lens=[19], num_sms=8, fuse_o_proj=True,
             after_step=lambda vm: fused.append(vm.last_stream.stream.plan.fused))
    assert fused[1:] == [True] * 3  # every decode step (the prompt's step may take the split path)
