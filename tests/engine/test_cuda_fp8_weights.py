"""The megakernel's fp8 weight buffers (engine/cuda/fp8_weights.py), on the CPU: e4m3 bytes as packed, one float32
scale per packed row, the embedding dequantised to bf16, block scales and misaligned widths refused by name."""
from __future__ import annotations

import pytest
import torch

from engine.cuda.fp8_weights import check_fp8_dims, kernel_weight_buffers
from engine.instructions.fp8_packing import dequantized_rows
from engine.instructions.layout import ModelDims
from engine.instructions.packing import pack_weights
from models.llama.fp8 import FP8_DTYPE, Fp8Scheme
from models.llama.weights import quantize_weights
from tests.gpu.mk_helpers import small
from tests.vm.helpers import random_weights


def _packed(scheme: Fp8Scheme, skip: frozenset[str] = frozenset(), hidden: int = 256):
    cfg = small(hidden, 4, 2, 64, 512, 2, 300)
    return cfg, pack_weights(quantize_weights(random_weights(cfg, seed=1), scheme, skip), torch.bfloat16)


def test_per_channel_buffers_are_bytes_and_a_scale_per_row() -> None:
    _, packed = _packed(Fp8Scheme("channel"))
    bufs = kernel_weight_buffers(packed)
    for name in ("w_qkv", "w_o", "w_gate_up", "w_down", "lm_head"):
        assert bufs[name].dtype == FP8_DTYPE
        scale = bufs[name + "_scale"]
        assert scale.dtype == torch.float32 and scale.shape == bufs[name].shape[:-1] and scale.is_contiguous()
        # the row's values are its bytes times its scale, as the VM reads them
        want = dequantized_rows(packed, name, (0, slice(0, 3)) if bufs[name].dim() == 3 else (slice(0, 3),))
        got = bufs[name][0, :3].float() if bufs[name].dim() == 3 else bufs[name][:3].float()
        s = scale[0, :3] if scale.dim() == 2 else scale[:3]
        assert torch.equal(got * s[:, None], want)
    assert bufs["embed"].dtype == torch.bfloat16
    assert torch.equal(bufs["embed"], dequantized_rows(packed, "embed", (slice(None),)).to(torch.bfloat16))
    assert not any(k.endswith("_scale_cols") or k == "embed_scale" for k in bufs)


def test_a_skipped_lm_head_stays_bf16() -> None:
    _, packed = _packed(Fp8Scheme("channel"), frozenset({"lm_head"}))
    bufs = kernel_weight_buffers(packed)
    assert bufs["lm_head"].dtype == torch.bfloat16 and "lm_head_scale" not in bufs and "w_o_scale" in bufs


def test_block_scales_are_refused_naming_the_buffer() -> None:
    _, packed = _packed(Fp8Scheme("block", (128, 128)))
    with pytest.raises(ValueError, match="w_qkv: fp8 scales per 128-column block; the megakernel applies one scale"):
        kernel_weight_buffers(packed)


def test_rows_of_partial_vectors_are_refused_naming_the_dimension() -> None:
    cfg, packed = _packed(Fp8Scheme("channel"), hidden=264)
    with pytest.raises(ValueError, match="hidden_size that is a multiple of 16, got 264"):
        check_fp8_dims(packed, ModelDims.from_config(cfg))
    cfg, packed = _packed(Fp8Scheme("channel"))
    check_fp8_dims(packed, ModelDims.from_config(cfg))
