"""Floor arithmetic checked by hand against peers.md §2, and the copy-bandwidth probe."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.bench.bandwidth import measure_copy_bandwidth
from engine.bench.floor import decode_floor, fp8_weight_bytes_read_per_token, kv_bytes_per_context_token, \
    mean_decode_context, weight_params_read_per_token
from models.llama.presets import preset_config


def test_llama_3_2_1b_weight_bytes() -> None:
    cfg = preset_config("llama-3.2-1b")
    # per layer: q,o 2*2048^2 + k,v 2*2048*512 + MLP 3*2048*8192 + 2 norms; tied head once; final norm.
    per_layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
    assert per_layer == 60_821_504
    assert weight_params_read_per_token(cfg) == 16 * per_layer + 128256 * 2048 + 2048 == 1_235_814_400
    assert weight_params_read_per_token(cfg) * 2 == 2_471_628_800
    assert kv_bytes_per_context_token(cfg, 2) == 32 * 1024


def test_untied_8b_counts_lm_head_not_embedding() -> None:
    cfg = preset_config("llama-3.1-8b")
    assert weight_params_read_per_token(cfg) == 7_504_924_672
    # Tying changes nothing: the vocab matrix is read once either way, the embedding is one row.
    tied = dataclasses.replace(cfg, tie_word_embeddings=True)
    assert weight_params_read_per_token(tied) == weight_params_read_per_token(cfg)
    assert kv_bytes_per_context_token(cfg, 2) == 128 * 1024


def test_decode_floor_by_hand() -> None:
    cfg = preset_config("llama-3.2-1b")
    bw = float(torch.empty(()).uniform_(1000.0, 5000.0))
    f = decode_floor(cfg, 2, prompt_len=32, new_tokens=128, bandwidth_gbps=bw)
    # Decode step j attends over 32 + j tokens, j = 0..127: mean 95.5.
    assert mean_decode_context(32, 128) == sum(32 + j for j in range(128)) / 128 == 95.5
    expected = (2_471_628_800 + 95.5 * 32768) / (bw * 1e9)
    assert f.seconds_per_token == pytest.approx(expected, rel=1e-12)
    # H200 at 4.28 TB/s: about 0.58 ms (the figure GPU.md quotes).
    assert decode_floor(cfg, 2, 32, 128, 4280.0).seconds_per_token * 1e3 == pytest.approx(0.578, abs=0.002)
    with pytest.raises(ValueError, match="bandwidth"):
        decode_floor(cfg, 2, 32, 128, 0.0)


def test_fp8_floor_counts_a_byte_per_weight_and_a_scale_per_row() -> None:
    cfg = preset_config("llama-3.2-1b")
    # rows: per layer q 2048 + k,v 2 * 512 + o 2048 + gate,up 2 * 8192 + down 2048 = 23552; the LM head's 128256
    rows = 16 * 23552 + 128256
    norms = (2 * 16 + 1) * 2048  # kept in bf16
    want = (1_235_814_400 - norms) + 4 * rows + 2 * norms
    assert fp8_weight_bytes_read_per_token(cfg, 2) == want
    f8 = decode_floor(cfg, 2, 32, 128, 4280.0, fp8_weights=True)
    assert f8.weight_bytes == want and f8.kv_bytes == decode_floor(cfg, 2, 32, 128, 4280.0).kv_bytes


def test_copy_bandwidth_positive_and_consistent() -> None:
    r = measure_copy_bandwidth("cpu", buffer_bytes=4 << 20, trials=3, copies_per_trial=2)
    assert r.gbps > 0 and r.best_seconds > 0
    assert r.gbps == pytest.approx(2 * (4 << 20) * 2 / r.best_seconds / 1e9)
    with pytest.raises(ValueError, match="buffer_bytes"):
        measure_copy_bandwidth("cpu", buffer_bytes=0)
