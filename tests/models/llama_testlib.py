"""Helpers shared by the models/llama tests: small random configs, the matching transformers model,
and a paged runner that allocates shuffled pages and drives prefill / decode through StepBatch."""
from __future__ import annotations

import os

import torch
import transformers

from models.llama.config import LlamaConfig, RopeScaling
from models.llama.init_random import random_state_dict
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights, to_state_dict, weights_from_state_dict


def fresh_seed() -> int:
    """A new seed each run (printed, so a failure can be replayed)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed={seed}")
    return seed


def small_config(heads: int = 4, kv_heads: int = 2, head_dim: int = 16, hidden: int = 64,
                 rope: RopeScaling | None = None, tied: bool = False, vocab: int = 384,
                 layers: int = 2, intermediate: int = 96) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim, rope_theta=10000.0,
        rope_scaling=rope, rms_norm_eps=1e-5, tie_word_embeddings=tied, max_position_embeddings=512,
    )


def random_weights(config: LlamaConfig, seed: int, dtype: torch.dtype = torch.float32) -> LlamaWeights:
    return weights_from_state_dict(config, random_state_dict(config, seed), dtype=dtype)


def hf_model(weights: LlamaWeights) -> transformers.LlamaForCausalLM:
    """transformers' LlamaForCausalLM (eager attention, float32) holding the same weights."""
    hf_cfg = transformers.LlamaConfig(**weights.config.to_hf_dict())
    hf_cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(hf_cfg).eval()
    model.load_state_dict({k: v.float() for k, v in to_state_dict(weights).items()}, strict=True)
    return model


def random_prompts(lengths: list[int], vocab: int, g: torch.Generator) -> list[list[int]]:
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


class PagedRunner:
    """Drives LlamaModel over a paged cache: each sequence gets randomly chosen, non-contiguous pages."""

    def __init__(self, weights: LlamaWeights, max_len: int, num_seqs: int, g: torch.Generator,
                 page_size: int = 4, spare_pages: int = 7) -> None:
        pages_per_seq = -(-max_len // page_size)
        num_pages = pages_per_seq * num_seqs + spare_pages
        perm = torch.randperm(num_pages, generator=g).tolist()
        self.tables = [perm[i * pages_per_seq:(i + 1) * pages_per_seq] for i in range(num_seqs)]
        self.page_size = page_size
        self.model = LlamaModel(weights)
        self.kv = PagedKVCache.allocate(weights.config, num_pages, page_size, weights.dtype)
        # Garbage in unwritten rows: reading a slot that was never written must show up as a mismatch.
        self.kv.k.normal_(0.0, 3.0, generator=g)
        self.kv.v.normal_(0.0, 3.0, generator=g)
        self.lens = [0] * num_seqs

    def step(self, new_tokens: dict[int, list[int]]) -> torch.Tensor:
        """Run one step for the sequences in `new_tokens` (seq index -> tokens); logits [S, V]."""
        seqs = list(new_tokens)
        batch = StepBatch.build([new_tokens[s] for s in seqs], [self.lens[s] for s in seqs],
                                [self.tables[s] for s in seqs], page_size=self.page_size)
        logits = self.model.forward(batch, self.kv)
        for s in seqs:
            self.lens[s] += len(new_tokens[s])
        return logits
