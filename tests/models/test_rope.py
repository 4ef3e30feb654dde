"""RoPE against transformers' own frequency functions and apply_rotary_pos_emb."""
from __future__ import annotations

import pytest
import torch
import transformers
from llama_testlib import fresh_seed, small_config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from models.llama.config import RopeScaling
from models.llama.rope import apply_rope, inv_freq, rope_cos_sin


@pytest.mark.parametrize("rope", [None, RopeScaling("linear", 3.0), RopeScaling("llama3", 8.0, 1.0, 4.0, 64),
                                  RopeScaling("llama3", 32.0, 2.0, 5.0, 128)])
def test_frequencies_and_rotation_match_transformers(rope: RopeScaling | None) -> None:
    cfg = small_config(head_dim=32, rope=rope)
    hf_cfg = transformers.LlamaConfig(**cfg.to_hf_dict())
    if rope is not None:
        ref, _ = ROPE_INIT_FUNCTIONS[rope.rope_type](hf_cfg, "cpu")
        assert torch.equal(inv_freq(cfg), ref)
    g = torch.Generator().manual_seed(fresh_seed())
    pos = torch.randint(0, 4000, (9,), generator=g)
    cos, sin = rope_cos_sin(cfg, pos)
    x = torch.randn(9, 4, 32, generator=g)
    ref_cos, ref_sin = LlamaRotaryEmbedding(hf_cfg)(x, pos[None])
    torch.testing.assert_close(cos, ref_cos[0], rtol=0, atol=0)
    torch.testing.assert_close(sin, ref_sin[0], rtol=0, atol=0)
    # HF rotates [B, heads, T, hd]; we rotate [T, heads, hd].
    q_ref, _ = apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], ref_cos, ref_sin)
    torch.testing.assert_close(apply_rope(x, cos, sin), q_ref[0].transpose(0, 1), rtol=0, atol=0)


def test_rotation_preserves_norm_and_relative_position() -> None:
    cfg = small_config(head_dim=16)
    g = torch.Generator().manual_seed(fresh_seed())
    q, k = torch.randn(1, 1, 16, generator=g), torch.randn(1, 1, 16, generator=g)

    def dot(pq: int, pk: int) -> float:
        cq, sq = rope_cos_sin(cfg, torch.tensor([pq]))
        ck, sk = rope_cos_sin(cfg, torch.tensor([pk]))
        return float((apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum())

    # Tolerance relative to |q||k|, not to the dot: a near-orthogonal random pair makes the dot tiny and
    # its fp32 rounding (≈1e-7 of the norms) a large relative error (seed 2094521510 hit that).
    scale = float(q.norm() * k.norm())
    assert dot(10, 3) == pytest.approx(dot(107, 100), abs=1e-5 * scale)
    c, s = rope_cos_sin(cfg, torch.tensor([77]))
    assert float(apply_rope(q, c, s).norm()) == pytest.approx(float(q.norm()), rel=1e-5)
