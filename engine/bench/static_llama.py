"""A compact PyTorch Llama decoder for the baselines: static shapes, so it is CUDA-graph capturable.

Everything one decode step touches lives in fixed buffers: the contiguous KV cache
[layers, 2, max_len, n_kv_heads, head_dim], the input token, its position and a history of greedy
outputs. `forward()` takes no arguments and only mutates those buffers in place (KV append, argmax
into history, token <- argmax, position += 1), so the very same step can run eagerly, be replayed
from one captured CUDA graph, or be compiled by torch.compile and then captured. The position is a
device tensor, so a replayed graph attends over a growing context through a length mask.

Numerics follow models.llama.model (HF): matmuls in the weight dtype, RMSNorm and softmax in
float32, RoPE cos/sin in float32 cast to the activation dtype. Q/K/V and gate/up are fused into one
matrix each (as vLLM and gpt-fast do) so the baselines are not handicapped by extra launches. With `fp8`, every
matrix (the LM head too, as the megakernel's `--quantization fp8`) is e4m3 with a scale per output channel and runs
through torch._scaled_mm (engine/bench/fp8_linear.py).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.bench.fp8_linear import fp8_matmul
from models.llama.config import LlamaConfig
from models.llama.fp8 import FP8_DTYPE, Fp8Scheme, quantize_fp8
from models.llama.model import rms_norm
from models.llama.rope import apply_rope, inv_freq
from models.llama.weights import LayerWeights, LlamaWeights

Collective = Callable[[torch.Tensor], torch.Tensor]


def _add_matrix(module: nn.Module, name: str, w: torch.Tensor, fp8: bool) -> None:
    """A matrix as buffers (no autograd; torch.compile treats them as graph inputs): w, or its e4m3 data and
    `{name}_scale`."""
    if fp8:
        q = quantize_fp8(w, Fp8Scheme("channel"))
        module.register_buffer(name, q.data, persistent=False)
        module.register_buffer(f"{name}_scale", q.scale, persistent=False)
    else:
        module.register_buffer(name, w, persistent=False)


def _linear(module: nn.Module, name: str, x: torch.Tensor) -> torch.Tensor:
    """x times the module's matrix `name` transposed (fp8: torch._scaled_mm)."""
    w = getattr(module, name)
    if w.dtype == FP8_DTYPE:
        return fp8_matmul(x, w, getattr(module, f"{name}_scale"))
    return x @ w.T


class _Layer(nn.Module):
    def __init__(self, layer: LayerWeights, fp8: bool) -> None:
        super().__init__()
        self.register_buffer("ln1", layer.input_layernorm, persistent=False)
        _add_matrix(self, "qkv", torch.cat([layer.q_proj, layer.k_proj, layer.v_proj]), fp8)
        _add_matrix(self, "o", layer.o_proj, fp8)
        self.register_buffer("ln2", layer.post_attention_layernorm, persistent=False)
        _add_matrix(self, "gate_up", torch.cat([layer.gate_proj, layer.up_proj]), fp8)
        _add_matrix(self, "down", layer.down_proj, fp8)


class StaticLlama(nn.Module):
    """Greedy decoder of `batch` sequences at the same position (prompts of one length) over a static KV cache
    of `max_len` positions each; `fp8`: the matrices in e4m3 (the module's docstring)."""

    def __init__(self, weights: LlamaWeights, max_len: int, batch: int = 1, fp8: bool = False,
                 reduce: Collective | None = None, gather: Collective | None = None) -> None:
        """`reduce`, `gather`: a tensor-parallel rank's collectives (engine/bench/tensor_parallel_baseline.py):
        `weights` is then its shard (a rank's heads, MLP rows, its share of the LM head's rows, the whole embedding),
        `reduce` sums the O and down projections' partial outputs over the ranks and `gather` concatenates the
        ranks' logits along the vocabulary."""
        super().__init__()
        self.reduce, self.gather = reduce, gather
        cfg = weights.config
        if max_len <= 0 or max_len > cfg.max_position_embeddings:
            raise ValueError(f"StaticLlama: max_len={max_len} must be in [1, max_position_embeddings="
                             f"{cfg.max_position_embeddings}]")
        if batch < 1:
            raise ValueError(f"StaticLlama: batch={batch} must be >= 1")
        self.config: LlamaConfig = cfg
        self.max_len, self.batch = max_len, batch
        dev, dt = weights.device, weights.dtype
        self.fp8 = fp8
        self.layers = nn.ModuleList(_Layer(layer, fp8) for layer in weights.layers)
        self.register_buffer("embed", weights.embed_tokens, persistent=False)
        self.register_buffer("norm", weights.norm, persistent=False)
        _add_matrix(self, "lm_head", weights.lm_head, fp8)
        self.register_buffer("inv_freq", inv_freq(cfg, dev), persistent=False)
        self.register_buffer("key_pos", torch.arange(max_len, device=dev), persistent=False)
        # Zeros, not empty: unwritten rows are masked, but 0 * NaN garbage would still poison P @ V.
        kv_shape = (cfg.num_hidden_layers, 2, batch, max_len, cfg.num_key_value_heads, cfg.head_dim)
        self.register_buffer("kv", torch.zeros(kv_shape, dtype=dt, device=dev), persistent=False)
        self.register_buffer("token", torch.zeros(batch, dtype=torch.int64, device=dev), persistent=False)
        self.register_buffer("pos", torch.zeros(1, dtype=torch.int64, device=dev), persistent=False)
        # history[b, p] = sequence b's greedy token predicted after its token at position p.
        self.register_buffer("history", torch.zeros((batch, max_len), dtype=torch.int64, device=dev),
                             persistent=False)

    def reset(self) -> None:
        """Start a new sequence. In place, so captured graphs keep pointing at the same buffers."""
        self.pos.zero_()
        self.token.zero_()
        self.history.zero_()

    def _attend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                valid: torch.Tensor) -> torch.Tensor:
        """q [B, n_heads, hd] over the caches [B, max_len, n_kv, hd]; positions where valid is False are masked."""
        cfg = self.config
        B = q.shape[0]
        qg = q.view(B, cfg.num_key_value_heads, cfg.gqa_ratio, cfg.head_dim)  # head h reads kv head h // ratio
        scores = torch.matmul(qg, k_cache.permute(0, 2, 3, 1)) * cfg.head_dim ** -0.5  # [B, n_kv, ratio, max_len]
        scores = scores.masked_fill(~valid, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v_cache.transpose(1, 2))  # [B, n_kv, ratio, hd]
        return out.reshape(B, cfg.q_size)

    def logits(self) -> torch.Tensor:
        """Run the model on (token, pos), appending its K/V to the caches; float32 logits [B, vocab]."""
        cfg = self.config
        pos, B = self.pos, self.batch
        h = F.embedding(self.token, self.embed)  # [B, H]
        freqs = pos.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        valid = self.key_pos <= pos  # [max_len]
        for i, layer in enumerate(self.layers):
            x = rms_norm(h, layer.ln1, cfg.rms_norm_eps)
            q, k, v = _linear(layer, "qkv", x).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
            q = apply_rope(q.view(B, cfg.num_attention_heads, cfg.head_dim), cos, sin)
            k = apply_rope(k.view(B, cfg.num_key_value_heads, cfg.head_dim), cos, sin)
            self.kv[i, 0].index_copy_(1, pos, k[:, None])
            self.kv[i, 1].index_copy_(1, pos, v.view(B, 1, cfg.num_key_value_heads, cfg.head_dim))
            h = h + self._reduced(_linear(layer, "o", self._attend(q, self.kv[i, 0], self.kv[i, 1], valid)))
            x = rms_norm(h, layer.ln2, cfg.rms_norm_eps)
            gate, up = _linear(layer, "gate_up", x).chunk(2, dim=-1)
            h = h + self._reduced(_linear(layer, "down", F.silu(gate) * up))
        x = rms_norm(h, self.norm, cfg.rms_norm_eps)
        logits = _linear(self, "lm_head", x).to(torch.float32)
        return logits if self.gather is None else self.gather(logits)

    def _reduced(self, partial: torch.Tensor) -> torch.Tensor:
        return partial if self.reduce is None else self.reduce(partial)

    def forward(self) -> None:
        """One greedy decode step, entirely on the device (no host sync, graph capturable)."""
        nxt = self.logits().argmax(dim=-1)  # [B]
        self.history.index_copy_(1, self.pos, nxt[:, None])
        self.token.copy_(nxt)
        self.pos.add_(1)
