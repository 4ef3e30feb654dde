"""The reference Llama forward pass over a paged KV cache: the oracle every other backend is checked against.

Plain PyTorch, written for readability. One `forward` handles a whole `StepBatch`: sequences of
different lengths, decode tokens and prefill chunks (including chunks that start mid-prompt) mixed
in one step. Numerics follow Hugging Face's LlamaForCausalLM: matmuls in the weights' dtype,
RMSNorm and softmax in float32, RoPE cos/sin in float32 cast to the activation dtype.
The per-layer pieces are module-level functions so the VM can reuse exactly this math. An fp8 matrix
(models/llama/fp8.py) is dequantised to the activations' dtype where it is used: the values it stands for.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from models.llama.config import LlamaConfig
from models.llama.fp8 import Fp8Matrix
from models.llama.kv_cache import PagedKVCache
from models.llama.rope import apply_rope, rope_cos_sin
from models.llama.step_batch import StepBatch
from models.llama.weights import LayerWeights, LlamaWeights, Matrix, dense


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF LlamaRMSNorm: normalise in float32, cast back, then scale in the input dtype."""
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def linear(x: torch.Tensor, w: Matrix) -> torch.Tensor:
    """x @ w.T in x's dtype (w [out, in], a tensor or an fp8 matrix)."""
    return x @ dense(w, x.dtype).T


def embed(weights: LlamaWeights, token_ids: torch.Tensor) -> torch.Tensor:
    """[T] token ids -> [T, H] hidden states in the weights' dtype."""
    e = weights.embed_tokens
    return e.dequantize(weights.dtype, rows=token_ids) if isinstance(e, Fp8Matrix) else e[token_ids]


def qkv_rope(config: LlamaConfig, layer: LayerWeights, h: torch.Tensor,
             cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """RMSNorm + Q/K/V projections + RoPE. Returns q [T, n_heads, hd], k and v [T, n_kv, hd]."""
    x = rms_norm(h, layer.input_layernorm, config.rms_norm_eps)
    t = x.shape[0]
    q = linear(x, layer.q_proj).view(t, config.num_attention_heads, config.head_dim)
    k = linear(x, layer.k_proj).view(t, config.num_key_value_heads, config.head_dim)
    v = linear(x, layer.v_proj).view(t, config.num_key_value_heads, config.head_dim)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def attend(config: LlamaConfig, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           q_positions: torch.Tensor) -> torch.Tensor:
    """Causal attention of one sequence's new queries over its whole context.

    q [n, n_heads, hd] at absolute positions q_positions [n]; k, v [L, n_kv, hd] hold positions
    0..L-1. Returns [n, n_heads * hd]. Query head h reads KV head h // gqa_ratio (HF repeat_kv).
    """
    ratio = config.gqa_ratio
    kh = k.repeat_interleave(ratio, dim=1).transpose(0, 1)  # [n_heads, L, hd]
    vh = v.repeat_interleave(ratio, dim=1).transpose(0, 1)
    qh = q.transpose(0, 1)  # [n_heads, n, hd]
    scores = torch.matmul(qh, kh.transpose(1, 2)) * config.head_dim ** -0.5  # [n_heads, n, L]
    key_pos = torch.arange(k.shape[0], device=q.device)
    future = key_pos[None, :] > q_positions[:, None]  # [n, L]
    scores = scores.masked_fill(future[None], float("-inf"))
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs, vh)  # [n_heads, n, hd]
    return out.transpose(0, 1).reshape(q.shape[0], -1)


def mlp(config: LlamaConfig, layer: LayerWeights, h: torch.Tensor) -> torch.Tensor:
    """RMSNorm + SiLU-gated MLP (no residual)."""
    x = rms_norm(h, layer.post_attention_layernorm, config.rms_norm_eps)
    return linear(F.silu(linear(x, layer.gate_proj)) * linear(x, layer.up_proj), layer.down_proj)


def _whole(x: torch.Tensor) -> torch.Tensor:
    return x


def decoder_layer(config: LlamaConfig, layer_idx: int, layer: LayerWeights, h: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, batch: StepBatch, kv: PagedKVCache,
                  slots: tuple[torch.Tensor, torch.Tensor],
                  reduce: Callable[[torch.Tensor], torch.Tensor] = _whole) -> torch.Tensor:
    """One transformer block: append this step's K/V to the cache, attend over it, MLP; residuals. `reduce`: what
    completes the O and down projections' outputs before each residual add (a tensor-parallel rank's partial sums are
    all-reduced: models/llama/tensor_parallel.py); the identity for a whole model."""
    q, k, v = qkv_rope(config, layer, h, cos, sin)
    kv.write(layer_idx, slots[0], slots[1], k, v)
    attn = torch.empty(h.shape[0], config.q_size, dtype=h.dtype, device=h.device)
    starts = batch.query_start.tolist()
    ctx_lens = batch.context_lens.tolist()
    for s in range(batch.num_seqs):
        lo, hi = starts[s], starts[s + 1]
        k_ctx, v_ctx = kv.gather(layer_idx, batch.block_tables[s], ctx_lens[s])
        attn[lo:hi] = attend(config, q[lo:hi], k_ctx.to(h.dtype), v_ctx.to(h.dtype), batch.positions[lo:hi])
    h = h + reduce(linear(attn, layer.o_proj))
    return h + reduce(mlp(config, layer, h))


def final_logits(weights: LlamaWeights, h: torch.Tensor) -> torch.Tensor:
    """Final RMSNorm + LM head; float32 logits [rows, vocab]."""
    x = rms_norm(h, weights.norm, weights.config.rms_norm_eps)
    return linear(x, weights.lm_head).to(torch.float32)


def check_batch(config: LlamaConfig, batch: StepBatch, kv: PagedKVCache) -> None:
    """Shape/consistency checks that would otherwise surface as obscure indexing errors."""
    if kv.num_layers != config.num_hidden_layers or kv.k.shape[2] != config.num_key_value_heads \
            or kv.k.shape[4] != config.head_dim:
        raise ValueError(f"KV cache shape {tuple(kv.k.shape)} does not match the model config")
    pages_needed = (batch.context_lens + kv.page_size - 1) // kv.page_size
    have = (batch.block_tables >= 0).sum(dim=1).to(pages_needed.dtype)
    if bool((have < pages_needed).any()):
        s = int(torch.nonzero(have < pages_needed)[0, 0])
        raise ValueError(f"sequence {s}: block table has {int(have[s])} pages, needs {int(pages_needed[s])} "
                         f"for context length {int(batch.context_lens[s])} at page_size {kv.page_size}")
    if int(batch.token_ids.max()) >= config.vocab_size or int(batch.token_ids.min()) < 0:
        raise ValueError(f"token id out of range [0, {config.vocab_size})")


class LlamaModel:
    """Reference model: `forward(batch, kv)` -> float32 logits [S, vocab] of each sequence's last new token."""

    def __init__(self, weights: LlamaWeights) -> None:
        self.weights = weights
        self.config = weights.config

    @torch.inference_mode()
    def forward(self, batch: StepBatch, kv: PagedKVCache) -> torch.Tensor:
        check_batch(self.config, batch, kv)
        h = embed(self.weights, batch.token_ids)
        cos, sin = rope_cos_sin(self.config, batch.positions)
        slots = kv.slot_mapping(batch)
        for i, layer in enumerate(self.weights.layers):
            h = decoder_layer(self.config, i, layer, h, cos, sin, batch, kv, slots)
        # Only the last new token of each sequence needs logits (norm and lm_head are row-wise).
        return final_logits(self.weights, h[batch.last_token_indices()])

    __call__ = forward

    def greedy(self, batch: StepBatch, kv: PagedKVCache) -> torch.Tensor:
        """int64 [S] argmax token of each sequence."""
        return self.forward(batch, kv).argmax(dim=-1)
