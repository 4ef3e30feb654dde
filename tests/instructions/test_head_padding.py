"""Stored heads (engine/instructions/head_padding.py): a head dim the kernel does not run, zero-padded into the
next lane width, gives the checkpoint's attention exactly: packed W_qkv / W_o / RoPE frequencies in the stored
layout, through HF's rotate_half over the stored width, with the checkpoint's softmax scale."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.instructions.head_padding import LANE_HEAD_DIMS, model_dims_of_stored, stored_head_dim
from engine.instructions.layout import ModelDims, qkv_row_map
from engine.instructions.packing import pack_weights
from models.llama.model import attend, qkv_rope, rms_norm
from models.llama.rope import apply_rope, rope_cos_sin
from tests.vm.helpers import random_weights, small_config


def test_stored_head_dims() -> None:
    assert [stored_head_dim(h) for h in (20, 32, 64, 80, 96, 100, 128, 160, 256, 512)] == \
        [32, 32, 64, 128, 128, 128, 128, 256, 256, 512]
    assert all(stored_head_dim(h) == h for h in LANE_HEAD_DIMS)
    m = model_dims_of_stored(128, 100)
    assert m[:50].tolist() == list(range(50)) and m[64:114].tolist() == list(range(50, 100))
    assert (m[50:64] == -1).all() and (m[114:] == -1).all()
    assert model_dims_of_stored(64, 64).tolist() == list(range(64))


@pytest.mark.parametrize("hd", (20, 80, 96, 100, 64))
def test_padded_heads_reproduce_the_checkpoints_attention(hd: int) -> None:
    cfg = small_config(hidden=64, heads=4, kv_heads=2, head_dim=hd)
    d = ModelDims.from_config(cfg)
    P, T = d.head_dim, 7
    w = random_weights(cfg, seed=hd)
    packed = pack_weights(w, torch.float32)
    h = torch.randn(T, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(T)
    layer = w.layers[1]
    cos, sin = rope_cos_sin(cfg, pos)
    q, k, v = qkv_rope(cfg, layer, h, cos, sin)
    want = attend(cfg, q, k, v, pos) @ layer.o_proj.T

    # The same layer from the packed buffers: rows scattered back to their stored heads (q: [T, n_heads, P]).
    y = rms_norm(h, layer.input_layernorm, cfg.rms_norm_eps) @ packed["w_qkv"][1].T  # [T, qkv_rows]
    kind, head, dim = qkv_row_map(d)
    parts = []
    for kd, n in ((0, d.n_heads), (1, d.n_kv), (2, d.n_kv)):
        t = torch.zeros(T, n, P)
        t[:, head[kind == kd], dim[kind == kd]] = y[:, torch.from_numpy(kind == kd)]
        parts.append(t)
    sq, sk, sv = parts
    pad = torch.from_numpy(model_dims_of_stored(P, hd) < 0)
    assert all((t[..., pad] == 0).all() for t in (sq, sk, sv))  # padded dims hold nothing
    ang = pos[:, None].float() * packed["rope_inv_freq"][None, :]  # [T, P/2]: zero past the checkpoint's pairs
    scos, ssin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    sq, sk = apply_rope(sq, scos, ssin), apply_rope(sk, scos, ssin)
    scale_fix = (P / hd) ** 0.5  # attend() scales by the config's head_dim: P here, the checkpoint's is hd
    got = attend(dataclasses.replace(cfg, head_dim=P), sq * scale_fix, sk, sv, pos) @ packed["w_o"][1].T
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
