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
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from models.llama.checkpoint_kv_scales import kv_head_range
from models.llama.config import LlamaConfig
from models.llama.kv_cache import PagedKVCache
from models.llama.model import check_batch, decoder_layer, embed, final_logits
from models.llama.rope import rope_cos_sin
from models.llama.step_batch import StepBatch
from models.llama.weights import (LlamaWeights, MatrixPart, assemble_weights, dense, load_weights, part_of,
                                  to_state_dict)

# (field, why it must divide): checked in this order, the first that does not divide is named
DIVIDED_FIELDS = (("num_attention_heads", "query heads are split over the ranks"),
                  ("num_key_value_heads", "KV heads are split over the ranks"),
                  ("intermediate_size", "the MLP's rows are split over the ranks"),
                  ("vocab_size", "the embedding and LM head rows are split over the ranks"))


def check_tensor_parallel(config: LlamaConfig, world: int, vocab_parallel: bool = True) -> None:
    """Raise ValueError naming the first config field `world` ranks cannot split evenly (the vocabulary only where
    it is split)."""
    if world < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {world}")
    for name, why in DIVIDED_FIELDS[:None if vocab_parallel else -1]:
        value = getattr(config, name)
        if value % world:
            raise ValueError(f"tensor_parallel_size {world} does not divide {name}={value} ({why})")


def shard_config(config: LlamaConfig, world: int) -> LlamaConfig:
    """One rank's config: heads, KV heads and intermediate size divided by `world` (the vocabulary stays whole: token
    ids are the model's)."""
    check_tensor_parallel(config, world, vocab_parallel=False)
    return replace(config, num_attention_heads=config.num_attention_heads // world,
                   num_key_value_heads=config.num_key_value_heads // world,
                   intermediate_size=config.intermediate_size // world)


def shard_parts(config: LlamaConfig, rank: int, world: int, vocab_parallel: bool = True) -> dict[str, MatrixPart]:
    """The parts of the checkpoint's matrices rank `rank` keeps (see the module docstring), by HF tensor name; the
    norms it keeps whole, and the embedding and LM head too unless `vocab_parallel`."""
    sc = shard_config(config, world)
    hd = config.head_dim
    q = (rank * sc.num_attention_heads * hd, (rank + 1) * sc.num_attention_heads * hd)
    kv = (rank * sc.num_key_value_heads * hd, (rank + 1) * sc.num_key_value_heads * hd)
    mlp = (rank * sc.intermediate_size, (rank + 1) * sc.intermediate_size)
    per_vocab = config.vocab_size // world
    vocab = (0, rank * per_vocab, (rank + 1) * per_vocab)
    layer = {"self_attn.q_proj.weight": (0, *q), "self_attn.k_proj.weight": (0, *kv), "self_attn.v_proj.weight": (0, *kv),
             "self_attn.o_proj.weight": (1, *q), "mlp.gate_proj.weight": (0, *mlp), "mlp.up_proj.weight": (0, *mlp),
             "mlp.down_proj.weight": (1, *mlp)}
    parts = {f"model.layers.{i}.{suffix}": part for i in range(config.num_hidden_layers) for suffix, part in layer.items()}
    if vocab_parallel:
        parts["model.embed_tokens.weight"] = vocab
        if not config.tie_word_embeddings:
            parts["lm_head.weight"] = vocab
    return parts


def shard_weights(weights: LlamaWeights, rank: int, world: int, vocab_parallel: bool = True) -> LlamaWeights:
    """Rank `rank`'s shard of `weights` in memory (see the module docstring; the embedding and LM head whole unless
    `vocab_parallel`); its config is shard_config's."""
    cfg = weights.config
    check_tensor_parallel(cfg, world, vocab_parallel)
    parts = shard_parts(cfg, rank, world, vocab_parallel)
    state = to_state_dict(weights, include_lm_head=not cfg.tie_word_embeddings, dequantize=False)
    shard = assemble_weights(shard_config(cfg, world),
                             {name: part_of(m, parts[name]) if name in parts else m for name, m in state.items()})
    heads = kv_head_range(parts, cfg)
    if weights.kv_scales is None or heads is None:
        return shard
    (k, v), (lo, hi) = weights.kv_scales, heads  # the rank's KV heads, as load_shard reads them
    return replace(shard, kv_scales=(k[:, lo:hi].clone(), v[:, lo:hi].clone()))


def megakernel_shard(weights: LlamaWeights, world: int) -> LlamaWeights:
    """A rank's shard with the whole vocabulary (`shard_parts(..., vocab_parallel=False)`) made into the model the
    megakernel of one rank runs: its residual is hidden / N (engine/instructions/ops/tp_allreduce.py averages the
    ranks'), so the embedding is scaled by 1 / N (exact for powers of two) and the RMSNorm epsilon by 1 / N^2
    (RMSNorm(h / N) with eps / N^2 is RMSNorm(h) with eps); the LM head stays the unscaled whole matrix: a step that
    returns logits computes them all on every rank (no gather), a greedy step only its share of the rows
    (engine/instructions/ops/tp_argmax.py takes the argmax across the ranks)."""
    cfg = weights.config
    scaled = (dense(weights.embed_tokens, torch.float32) / world).to(weights.dtype)
    config = replace(cfg, rms_norm_eps=cfg.rms_norm_eps / world ** 2, tie_word_embeddings=False)
    return replace(weights, config=config, embed_tokens=scaled, lm_head=weights.lm_head)


def load_megakernel_shard(model_dir: str | Path, config: LlamaConfig, rank: int, world: int,
                          **load_kw: Any) -> LlamaWeights:
    """Rank `rank`'s megakernel shard (megakernel_shard) read from the checkpoint: its part of each layer matrix,
    the embedding and LM head whole."""
    check_tensor_parallel(config, world, vocab_parallel=False)
    weights = load_weights(model_dir, config, parts=shard_parts(config, rank, world, vocab_parallel=False), **load_kw)
    return megakernel_shard(replace(weights, config=shard_config(config, world)), world)


def load_shard(model_dir: str | Path, config: LlamaConfig, rank: int, world: int, **load_kw: Any) -> LlamaWeights:
    """Rank `rank`'s shard read from the checkpoint (only its part of each matrix: load_weights' `parts`); the other
    keywords are load_weights'."""
    check_tensor_parallel(config, world)
    weights = load_weights(model_dir, config, parts=shard_parts(config, rank, world), **load_kw)
    return replace(weights, config=shard_config(config, world))


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
