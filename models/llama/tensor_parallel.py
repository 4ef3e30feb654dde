"""Megatron-style tensor parallelism of the reference model over a torch.distributed group (gloo on CPUs, NCCL on
GPUs): rank r of N holds

- Q/K/V and gate/up column-parallel: query heads [r n_heads / N, ...), KV heads [r n_kv / N, ...), intermediate
  rows [r I / N, ...) (each rank attends over its own heads and keeps its own KV heads' cache);
- O and down row-parallel: the matching columns; the partial sums are all-reduced, once after each;
- the embedding and the LM head vocab-parallel: rows [r V / N, ...); a token outside a rank's rows embeds as zeros
  there (the all-reduce fills it in), and the logits are all-gathered.

A rank's shard is an ordinary LlamaWeights of a per-rank config (heads, KV heads and intermediate size divided by N),
so the per-layer math is exactly models/llama/model.py's (decoder_layer with the all-reduce as its `reduce`). Every
rank runs every step on the same batch; its logits are the full vocabulary's.

A model these sizes do not divide is refused before any weight loads, naming the field (check_tensor_parallel).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from models.llama.config import LlamaConfig
from models.llama.fp8 import Fp8Matrix
from models.llama.kv_cache import PagedKVCache
from models.llama.model import check_batch, decoder_layer, embed, final_logits
from models.llama.rope import rope_cos_sin
from models.llama.step_batch import StepBatch
from models.llama.weights import LayerWeights, LlamaWeights, Matrix

# (field, why it must divide): checked in this order, the first that does not divide is named
DIVIDED_FIELDS = (("num_attention_heads", "query heads are split over the ranks"),
                  ("num_key_value_heads", "KV heads are split over the ranks"),
                  ("intermediate_size", "the MLP's rows are split over the ranks"),
                  ("vocab_size", "the embedding and LM head rows are split over the ranks"))


def check_tensor_parallel(config: LlamaConfig, world: int) -> None:
    """Raise ValueError naming the first config field `world` ranks cannot split evenly."""
    if world < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {world}")
    for name, why in DIVIDED_FIELDS:
        value = getattr(config, name)
        if value % world:
            raise ValueError(f"tensor_parallel_size {world} does not divide {name}={value} ({why})")


def shard_config(config: LlamaConfig, world: int) -> LlamaConfig:
    """One rank's config: heads, KV heads and intermediate size divided by `world` (the vocabulary stays whole: token
    ids are the model's)."""
    check_tensor_parallel(config, world)
    return replace(config, num_attention_heads=config.num_attention_heads // world,
                   num_key_value_heads=config.num_key_value_heads // world,
                   intermediate_size=config.intermediate_size // world)


def _splittable(m: Fp8Matrix) -> Fp8Matrix:
    if m.granularity not in ("channel", "tensor"):
        raise ValueError("tensor parallelism splits fp8 matrices with per-channel or per-tensor scales only")
    return m


def _rows(m: Matrix, lo: int, hi: int) -> Matrix:
    if isinstance(m, Fp8Matrix):
        scale = _splittable(m).scale[lo:hi] if m.granularity == "channel" else m.scale
        return Fp8Matrix(m.data[lo:hi].contiguous(), scale.contiguous(), m.granularity, m.block)
    return m[lo:hi].contiguous()


def _cols(m: Matrix, lo: int, hi: int) -> Matrix:
    if isinstance(m, Fp8Matrix):
        return Fp8Matrix(_splittable(m).data[:, lo:hi].contiguous(), m.scale, m.granularity, m.block)
    return m[:, lo:hi].contiguous()


def shard_weights(weights: LlamaWeights, rank: int, world: int) -> LlamaWeights:
    """Rank `rank`'s shard of `weights` (see the module docstring); its config is shard_config's."""
    cfg = weights.config
    sc = shard_config(cfg, world)
    hd = cfg.head_dim
    q = (rank * sc.num_attention_heads * hd, (rank + 1) * sc.num_attention_heads * hd)
    kv = (rank * sc.num_key_value_heads * hd, (rank + 1) * sc.num_key_value_heads * hd)
    mlp = (rank * sc.intermediate_size, (rank + 1) * sc.intermediate_size)
    per_vocab = cfg.vocab_size // world
    vocab = (rank * per_vocab, (rank + 1) * per_vocab)
    layers = tuple(LayerWeights(
        input_layernorm=lw.input_layernorm, q_proj=_rows(lw.q_proj, *q), k_proj=_rows(lw.k_proj, *kv),
        v_proj=_rows(lw.v_proj, *kv), o_proj=_cols(lw.o_proj, *q),
        post_attention_layernorm=lw.post_attention_layernorm, gate_proj=_rows(lw.gate_proj, *mlp),
        up_proj=_rows(lw.up_proj, *mlp), down_proj=_cols(lw.down_proj, *mlp)) for lw in weights.layers)
    embed = _rows(weights.embed_tokens, *vocab)
    lm_head = embed if weights.lm_head is weights.embed_tokens else _rows(weights.lm_head, *vocab)
    return LlamaWeights(sc, embed, layers, weights.norm, lm_head)


@dataclass(frozen=True)
class TensorParallelGroup:
    """This process's place in a tensor-parallel group of torch.distributed."""

    rank: int
    world: int
    group: dist.ProcessGroup | None = None  # None: the default group

    @staticmethod
    def current(group: dist.ProcessGroup | None = None) -> TensorParallelGroup:
        return TensorParallelGroup(dist.get_rank(group), dist.get_world_size(group), group)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's x, concatenated along the last dim in rank order."""
        if self.world == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


class TensorParallelLlama:
    """The reference model on one rank of a tensor-parallel group: `forward(batch, kv)` -> float32 logits [S, vocab]
    (the whole vocabulary, on every rank) of each sequence's last new token. `weights` is this rank's shard
    (shard_weights) and `kv` holds this rank's KV heads."""

    def __init__(self, weights: LlamaWeights, tp: TensorParallelGroup) -> None:
        self.weights = weights
        self.config = weights.config
        self.tp = tp
        self.vocab_rows = weights.embed_tokens.shape[0]
        self.vocab_lo = tp.rank * self.vocab_rows

    def _embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        local = token_ids - self.vocab_lo
        mine = (local >= 0) & (local < self.vocab_rows)
        h = embed(self.weights, local.clamp(0, self.vocab_rows - 1))
        return self.tp.all_reduce(h * mine[:, None].to(h.dtype))

    @torch.inference_mode()
    def forward(self, batch: StepBatch, kv: PagedKVCache) -> torch.Tensor:
        check_batch(self.config, batch, kv)  # token ids against the whole vocabulary: the shard config keeps it
        h = self._embed(batch.token_ids)
        cos, sin = rope_cos_sin(self.config, batch.positions)
        slots = kv.slot_mapping(batch)
        for i, layer in enumerate(self.weights.layers):
            h = decoder_layer(self.config, i, layer, h, cos, sin, batch, kv, slots, reduce=self.tp.all_reduce)
        return self.tp.all_gather_last(final_logits(self.weights, h[batch.last_token_indices()]))

    __call__ = forward
