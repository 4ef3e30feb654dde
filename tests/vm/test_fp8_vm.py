"""fp8 matrices on the VM (engine/instructions/fp8_packing.py): the packed e4m3 bytes and their row / column-block
scales give the logits the torch reference computes from the same fp8 weights, for every scale layout."""
from __future__ import annotations

import pytest
import torch

from engine.backends.torch_backend import TorchBackend
from engine.backends.vm_backend import VMBackend
from engine.bench.logprob_error import PAGE_SIZE, teacher_forced
from engine.instructions.packing import pack_weights
from models.llama.fp8 import Fp8Scheme
from models.llama.weights import quantize_weights
from tests.models.llama_testlib import fresh_seed
from tests.vm.helpers import random_weights, small_config

CPU = torch.device("cpu")


@pytest.mark.parametrize("scheme", [Fp8Scheme("channel"), Fp8Scheme("tensor"), Fp8Scheme("block", (16, 32))],
                         ids=["channel", "tensor", "block"])
@pytest.mark.parametrize("tied", [True, False])
def test_vm_equals_torch_on_the_same_fp8_weights(scheme: Fp8Scheme, tied: bool) -> None:
    cfg = small_config(tied=tied, vocab=200)
    weights = quantize_weights(random_weights(cfg, seed=fresh_seed() % 1000), scheme)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, cfg.vocab_size, (14,), generator=g).tolist()
    ref = teacher_forced(TorchBackend(weights, num_pages=4, page_size=PAGE_SIZE, device=CPU), tokens[:5], tokens[5:])
    got = teacher_forced(VMBackend(weights, num_pages=4, page_size=PAGE_SIZE, num_sms=12), tokens[:5], tokens[5:])
    assert torch.allclose(got, ref, atol=1e-4), (got - ref).abs().max()


def test_packed_buffers_hold_bytes_and_row_block_scales() -> None:
    cfg = small_config(hidden=64, inter=128)
    packed = pack_weights(quantize_weights(random_weights(cfg), Fp8Scheme("block", (16, 32))), torch.float32)
    assert packed["w_gate_up"].dtype == torch.float8_e4m3fn
    L, R, K = packed["w_gate_up"].shape
    assert packed["w_gate_up_scale"].shape == (L, R, K // 32) and int(packed["w_gate_up_scale_cols"]) == 32
    assert packed["lm_head"] is packed["embed"]  # tied: one buffer
    assert packed["attn_norm"].dtype == torch.float32


def test_block_scales_cut_by_head_padding_are_refused() -> None:
    cfg = small_config(hidden=80, heads=4, kv_heads=2, head_dim=20)  # heads stored 32 wide: W_o's columns move
    weights = quantize_weights(random_weights(cfg), Fp8Scheme("block", (16, 16)))
    with pytest.raises(ValueError, match="w_o: fp8 block scales straddle"):
        pack_weights(weights, torch.float32)
    pack_weights(quantize_weights(random_weights(cfg), Fp8Scheme("channel")), torch.float32)  # per channel: fine
