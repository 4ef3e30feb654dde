"""The prefill bench's PyTorch baseline: a whole prompt batch in one forward, as a compiled PyTorch server would run
it: fused Q/K/V and gate/up matrices through cuBLAS (F.linear), causal `scaled_dot_product_attention` (flash
kernels on a GPU), the LM head on each sequence's last token only, greedy ids out. Numerics follow
models.llama.model (RMSNorm in float32, RoPE in the activation dtype)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.llama.model import rms_norm
from models.llama.rope import inv_freq, rotate_half
from models.llama.weights import LlamaWeights


class DensePrefill(nn.Module):
    """`forward(tokens [B, L])` -> each sequence's greedy next token [B], prompts at positions 0..L-1."""

    def __init__(self, weights: LlamaWeights) -> None:
        super().__init__()
        self.config = cfg = weights.config
        self.layers = [(layer.input_layernorm, torch.cat([layer.q_proj, layer.k_proj, layer.v_proj]), layer.o_proj,
                        layer.post_attention_layernorm, torch.cat([layer.gate_proj, layer.up_proj]), layer.down_proj)
                       for layer in weights.layers]
        self.embed, self.norm, self.lm_head = weights.embed_tokens, weights.norm, weights.lm_head
        self.freqs = inv_freq(cfg, weights.device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        B, L = tokens.shape
        nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        angles = torch.arange(L, device=tokens.device, dtype=torch.float32)[:, None] * self.freqs[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(self.embed.dtype)[:, None, :], emb.sin().to(self.embed.dtype)[:, None, :]
        h = F.embedding(tokens, self.embed)  # [B, L, H]
        for ln1, qkv, o, ln2, gate_up, down in self.layers:
            x = rms_norm(h, ln1, cfg.rms_norm_eps)
            q, k, v = F.linear(x, qkv).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
            q = q.view(B, L, nh, hd)
            k = k.view(B, L, nkv, hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                  v.view(B, L, nkv, hd).transpose(1, 2), is_causal=True,
                                                  enable_gqa=nh != nkv)
            h = h + F.linear(attn.transpose(1, 2).reshape(B, L, nh * hd), o)
            gate, up = F.linear(rms_norm(h, ln2, cfg.rms_norm_eps), gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, down)
        last = rms_norm(h[:, -1], self.norm, cfg.rms_norm_eps)
        return F.linear(last, self.lm_head).argmax(dim=-1)


def prefill_flops(weights: LlamaWeights, batch: int, prompt_len: int) -> float:
    """FLOPs of one prefill of `batch` prompts of `prompt_len` tokens: 2 per weight per token for the layers' matrices,
    causal attention (QK^T and PV over about half the L x L pairs), and the LM head on the last tokens only."""
    cfg = weights.config
    layer_params = sum(t.numel() for layer in weights.layers
                       for t in (layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj, layer.gate_proj,
                                 layer.up_proj, layer.down_proj))
    tokens = batch * prompt_len
    attention = 2 * 2 * batch * prompt_len * (prompt_len + 1) / 2 * cfg.num_attention_heads * cfg.head_dim
    attention *= cfg.num_hidden_layers
    return 2.0 * layer_params * tokens + attention + 2.0 * weights.lm_head.numel() * batch
