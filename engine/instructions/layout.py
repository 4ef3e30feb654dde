"""The one definition of every global buffer the VM and the CUDA interpreter share.

Three groups (shapes in `buffer_specs`, documented in docs/INSTRUCTIONS.md):
- packed weights, built once per model by `packing.pack_weights` (bf16 on the GPU, fp32 allowed in the VM);
- per-stream activations, partials, logits and counters (fp32 / int32), sized by the stream's StepShape;
- the step-args int32 buffer (token ids, positions, slots, query starts, context lens, block tables)
  with a self-describing header, the only thing the host rewrites between steps of one stream.
The paged KV cache is the engine's `PagedKVCache` tensors `[L, num_pages, n_kv, page_size, head_dim]`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.instructions.head_padding import stored_head_dim
from models.llama.config import LlamaConfig

# ---- step-args header (int32 words at the start of the step-args buffer) -----------------------------
SA_VERSION, SA_NUM_TOKENS, SA_NUM_SEQS, SA_MAX_PAGES, SA_PAGE_SIZE = 0, 1, 2, 3, 4
SA_OFF_TOKEN_IDS, SA_OFF_POSITIONS, SA_OFF_SLOTS, SA_OFF_QUERY_START = 5, 6, 7, 8
SA_OFF_CONTEXT_LENS, SA_OFF_BLOCK_TABLES, SA_TOTAL_WORDS, SA_OFF_QUERY_UNITS = 9, 10, 11, 12
STEP_ARGS_HEADER_WORDS = 16


def pow2_align(n: int, cap: int = 16) -> int:
    """Largest power of two <= cap dividing n: row blocks are multiples of it (16 for real models)."""
    a = cap
    while a > 1 and n % a:
        a //= 2
    return a


@dataclass(frozen=True)
class ModelDims:
    """Model sizes the interpreter needs, derived from a LlamaConfig (nothing model-specific is baked in).
    `head_dim` is the stored width of a head (every buffer, the KV cache, the kernel); `model_head_dim` the
    checkpoint's (the softmax scale, the RoPE frequencies), zero-padded to head_dim (head_padding.py); 0: the same."""

    hidden: int
    intermediate: int
    layers: int
    n_heads: int
    n_kv: int
    head_dim: int
    vocab: int
    eps: float
    model_head_dim: int = 0
    # Ranks of a tensor-parallel group running this model's shard each (models/llama/tensor_parallel.py
    # megakernel_shard): the dims above are one rank's, and each layer's residual is averaged over the ranks
    # after its O and down projections (TP_ALLREDUCE). 1: one GPU holds the whole model.
    tp_world: int = 1

    def __post_init__(self) -> None:
        if self.tp_world < 1:
            raise ValueError(f"ModelDims: tp_world must be >= 1, got {self.tp_world}")
        if self.model_head_dim == 0:
            object.__setattr__(self, "model_head_dim", self.head_dim)
        if not 0 < self.model_head_dim <= self.head_dim:
            raise ValueError(f"ModelDims: model_head_dim {self.model_head_dim} must be in (0, head_dim {self.head_dim}]")

    @staticmethod
    def from_config(c: LlamaConfig) -> ModelDims:
        return ModelDims(c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
                         c.num_key_value_heads, stored_head_dim(c.head_dim), c.vocab_size, c.rms_norm_eps,
                         c.head_dim)

    @property
    def gqa(self) -> int:
        return self.n_heads // self.n_kv

    @property
    def group_rows(self) -> int:
        """Packed W_qkv rows of one KV group: its G q heads, then its k head, then its v head."""
        return (self.gqa + 2) * self.head_dim

    @property
    def qkv_rows(self) -> int:
        return self.n_kv * self.group_rows

    @property
    def q_cols(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def gu_tile(self) -> int:
        """W_gate_up interleave granularity: packed rows [2kT, 2kT+T) = gate rows [kT, kT+T), then up."""
        return pow2_align(self.intermediate)


def rope_perm(head_dim: int) -> np.ndarray:
    """perm[p] = original dim stored at packed position p: rotate_half partners (i, i+hd/2) -> (2i, 2i+1)."""
    half = head_dim // 2
    perm = np.empty(head_dim, dtype=np.int64)
    perm[0::2] = np.arange(half)
    perm[1::2] = np.arange(half) + half
    return perm


def qkv_row_map(d: ModelDims) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every packed W_qkv row: (kind 0=q 1=k 2=v, head index (q head or kv head), dim in the stored head)."""
    kinds, heads, dims = [], [], []
    perm = rope_perm(d.head_dim)
    for g in range(d.n_kv):
        for j in range(d.gqa + 2):
            kind = 0 if j < d.gqa else (1 if j == d.gqa else 2)
            kinds.append(np.full(d.head_dim, kind))
            heads.append(np.full(d.head_dim, g * d.gqa + j if kind == 0 else g))
            dims.append(perm if kind < 2 else np.arange(d.head_dim))  # v is not rotated: no permutation
    return np.concatenate(kinds), np.concatenate(heads), np.concatenate(dims)


@dataclass(frozen=True)
class StepShape:
    """What a cached stream is specialised for: token count, sequence count, block-table width."""

    num_tokens: int
    num_seqs: int
    max_pages: int

    def __post_init__(self) -> None:
        if self.num_seqs < 1 or self.num_tokens < self.num_seqs or self.max_pages < 1:
            raise ValueError(f"StepShape: need num_tokens >= num_seqs >= 1 and max_pages >= 1, got {self}")


@dataclass(frozen=True)
class BufferSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "weight" (bf16 on GPU), "float32", "bfloat16" or "int32"
    group: str  # "weights", "activations", "sync", "step_args"


def weight_specs(d: ModelDims) -> list[BufferSpec]:
    L, H, I = d.layers, d.hidden, d.intermediate
    w = lambda n, s: BufferSpec(n, s, "weight", "weights")  # noqa: E731
    return [
        w("embed", (d.vocab, H)), w("attn_norm", (L, H)), w("w_qkv", (L, d.qkv_rows, H)),
        w("w_o", (L, H, d.q_cols)), w("mlp_norm", (L, H)), w("w_gate_up", (L, 2 * I, H)),
        w("w_down", (L, H, I)), w("final_norm", (H,)), w("lm_head", (d.vocab, H)),
        BufferSpec("rope_inv_freq", (d.head_dim // 2,), "float32", "weights"),
    ]


def activation_specs(d: ModelDims, shape: StepShape, num_splits: int, lm_blocks: int) -> list[BufferSpec]:
    T, S, H = shape.num_tokens, shape.num_seqs, d.hidden
    f = lambda n, s: BufferSpec(n, s, "float32", "activations")  # noqa: E731
    specs = [
        f("hidden", (T, H)), f("mid", (T, H)), f("q", (T, d.q_cols)), f("attn_out", (T, d.q_cols)),
        f("o_part", (num_splits, T, d.q_cols)), f("lse_part", (num_splits, T, d.n_heads)),
        f("act", (T, d.intermediate)), f("logits", (S, d.vocab)),
        # TILE_MATMUL's inputs in the tensor cores' type, written once per layer (ops/tile_matmul.py: NORM tiles,
        # the attention ops next to attn_out, GATE_UP tiles) and read by every tile of the next op
        BufferSpec("x_bf16", (T, H), "bfloat16", "activations"),
        BufferSpec("attn_bf16", (T, d.q_cols), "bfloat16", "activations"),
        BufferSpec("act_bf16", (T, d.intermediate), "bfloat16", "activations"),
        f("lm_max", (S, lm_blocks)), BufferSpec("lm_arg", (S, lm_blocks), "int32", "activations"),
        BufferSpec("out_tokens", (S,), "int32", "activations"),
    ]
    return specs


def step_args_words(shape: StepShape) -> int:
    T, S = shape.num_tokens, shape.num_seqs
    return STEP_ARGS_HEADER_WORDS + 3 * T + (S + 1) + S + S * shape.max_pages


def step_args_offsets(shape: StepShape) -> dict[str, int]:
    """Word offsets of each step-args section (also written into the header)."""
    T, S = shape.num_tokens, shape.num_seqs
    off: dict[str, int] = {}
    o = STEP_ARGS_HEADER_WORDS
    for name, n in (("token_ids", T), ("positions", T), ("slot_mapping", T), ("query_start", S + 1),
                    ("context_lens", S), ("block_tables", S * shape.max_pages), ("query_units", S + 1)):
        off[name] = o
        o += n
    off["total"] = o
    return off
