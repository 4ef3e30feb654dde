"""Shared scenario driver: run the same prefill/decode steps through the reference model and the VM."""
from __future__ import annotations

import random

import torch

from engine.backends.vm_backend import VMBackend
from models.llama.config import LlamaConfig
from models.llama.init_random import random_state_dict
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights, weights_from_state_dict


def small_config(hidden: int = 64, heads: int = 4, kv_heads: int = 2, head_dim: int = 32, inter: int = 128,
                 layers: int = 2, vocab: int = 160, tied: bool = True) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                       rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=tied)


def random_weights(cfg: LlamaConfig, seed: int = 0) -> LlamaWeights:
    sd = random_state_dict(cfg, seed=seed, dtype=torch.float32)
    # Larger matrices than init's 0.02 std so logits are well separated and attention is not uniform.
    sd = {k: (v * 5 if not k.endswith("norm.weight") else v) for k, v in sd.items()}
    return weights_from_state_dict(cfg, sd, dtype=torch.float32)


class Scenario:
    """Sequences with random prompts on shuffled (non-contiguous) KV pages; `step` advances some of them."""

    def __init__(self, cfg: LlamaConfig, prompt_lens: list[int], page_size: int, num_pages: int, seed: int = 0):
        self.rng = random.Random(seed)
        self.cfg, self.page_size = cfg, page_size
        self.pool = list(range(num_pages))
        self.rng.shuffle(self.pool)
        self.pending = [[self.rng.randrange(cfg.vocab_size) for _ in range(n)] for n in prompt_lens]
        self.pos = [0] * len(prompt_lens)
        self.tables: list[list[int]] = [[] for _ in prompt_lens]

    def batch(self, chunk: list[int | None]) -> tuple[StepBatch, list[int]]:
        """Step with `chunk[s]` pending tokens of sequence s (None: all pending; 0: skip it)."""
        seqs = [s for s, c in enumerate(chunk) if c != 0 and self.pending[s]]
        new, starts, tables = [], [], []
        for s in seqs:
            n = len(self.pending[s]) if chunk[s] is None else min(chunk[s], len(self.pending[s]))
            toks, self.pending[s] = self.pending[s][:n], self.pending[s][n:]
            while len(self.tables[s]) * self.page_size < self.pos[s] + n:
                self.tables[s].append(self.pool.pop())
            new.append(toks)
            starts.append(self.pos[s])
            tables.append(list(self.tables[s]))
            self.pos[s] += n
        return StepBatch.build(new, starts, tables, page_size=self.page_size), seqs

    def feed(self, seqs: list[int], tokens: list[int]) -> None:
        for s, t in zip(seqs, tokens):
            if not self.pending[s]:
                self.pending[s] = [t]


def run_pair(cfg: LlamaConfig, weights: LlamaWeights, schedule: list[list[int | None]], prompt_lens: list[int],
             page_size: int = 8, num_sms: int = 8, policy: str = "rr", seed: int = 0,
             check_races: bool = True, **vm_kw: object) -> VMBackend:
    """Run `schedule` (one chunk list per step) through both backends; assert logits and tokens agree."""
    num_pages = 64
    ref, kv = LlamaModel(weights), PagedKVCache.allocate(cfg, num_pages, page_size, dtype=torch.float32)
    vm = VMBackend(weights, num_pages, page_size, num_sms=num_sms, policy=policy, seed=seed,
                   check_races=check_races, **vm_kw)
    sc = Scenario(cfg, prompt_lens, page_size, num_pages, seed)
    for step, chunk in enumerate(schedule):
        batch, seqs = sc.batch(chunk)
        want = ref.forward(batch, kv)
        got = vm.forward(batch)
        err = (want - got).abs().max().item()
        assert err < 1e-5 * max(1.0, want.abs().max().item()), f"step {step}: max |logit diff| {err}"
        assert vm.last_tokens.tolist() == want.argmax(-1).tolist(), f"step {step}: greedy tokens differ"
        sc.feed(seqs, want.argmax(-1).tolist())
    return vm
