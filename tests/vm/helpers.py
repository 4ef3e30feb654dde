"""Shared scenario driver: run the same prefill/decode steps through the reference model and the VM."""
from __future__ import annotations

import random
from collections.abc import Callable

import torch

from engine.backends.vm_backend import VMBackend
from engine.instructions.layout import ModelDims
from engine.instructions.registry import OPCODES, Opcode
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, CompiledStream, compile_stream
from engine.scheduler.compiler.target import TargetDevice
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


def compile_decode(cfg: LlamaConfig, policy: str, num_sms: int, batch: int = 2, context: int = 37,
                   **split_kw: object) -> CompiledStream:
    """The compiled decode step of `batch` sequences at `context` (page size 8) for `num_sms` SMs."""
    return compile_stream(ModelDims.from_config(cfg), decode_batch(batch, context, 8), 8,
                          BuildParams.of(policy, **split_kw), TargetDevice(num_sms=num_sms))


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
             check_races: bool = True, after_step: Callable[[VMBackend], None] | None = None,
             **vm_kw: object) -> VMBackend:
    """Run `schedule` (one chunk list per step) through both backends; assert logits and tokens agree.
    `after_step(vm)` runs after each step (e.g. to check which stream the step ran)."""
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
        if after_step is not None:
            after_step(vm)
        sc.feed(seqs, want.argmax(-1).tolist())
    return vm


def run_vm(weights: LlamaWeights, cfg: LlamaConfig, prompt_lens: list[int], schedule: list[list[int | None]],
           scenario_seed: int, after_step: Callable[[VMBackend], None] | None = None,
           **vm_kw: object) -> list[torch.Tensor]:
    """The logits of each step of `schedule` on the VM alone (page size 8, its greedy tokens fed back)."""
    vm = VMBackend(weights, 64, 8, **vm_kw)
    sc = Scenario(cfg, prompt_lens, 8, 64, seed=scenario_seed)
    out = []
    for chunk in schedule:
        batch, seqs = sc.batch(chunk)
        out.append(vm.forward(batch))
        if after_step is not None:
            after_step(vm)
        sc.feed(seqs, vm.last_tokens.tolist())
    return out


SPLIT_ATTENTION = {Opcode.ATTN_PARTIAL, Opcode.ATTN_REDUCE, Opcode.O_PROJ_RESIDUAL}


def expect_fused(fused: bool) -> Callable[[VMBackend], None]:
    """An `after_step` check: the step ran the fused (ATTN_O_PROJ) or the split-attention stream."""
    def check(vm: VMBackend) -> None:
        cs = vm.last_stream
        assert cs is not None and cs.stream.plan.fused == fused
        ops = {OPCODES.code_of(i) for i in cs.stream.instrs}
        if fused:
            assert Opcode.ATTN_O_PROJ in ops and not ops & SPLIT_ATTENTION
        else:
            assert Opcode.ATTN_O_PROJ not in ops and Opcode.O_PROJ_RESIDUAL in ops
    return check
