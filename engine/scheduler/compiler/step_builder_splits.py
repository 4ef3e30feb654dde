"""How one step's work is cut into instructions: row blocks sized from the model dims and the target's SMs.

Nothing here is specific to one model: blocks are multiples of `layout.pow2_align` units (16 rows on
real models), counts target about `waves * num_sms` instructions per op, and balanced partitions keep
every block of an op within one unit of the others. Attention's cuts (KV splits, query parts, head chunks) are in
attention_cuts.py, a tensor-parallel rank's (all-reduce chunks, its share of the vocabulary) in tensor_parallel_cuts.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.instructions.layout import ModelDims, StepShape, pow2_align
from engine.scheduler.compiler.attention_cuts import (attn_head_chunks, fuses_o_proj, num_attn_splits, query_parts,
                                                      step_seq_splits)
from engine.scheduler.compiler.partition import partition
from engine.scheduler.compiler.step_builder_tiles import TilePlan, tile_plan, tiles_fit
from engine.scheduler.compiler.target import TargetDevice
from engine.scheduler.compiler.tensor_parallel_cuts import tp_chunk_cut, tp_vocab_rows


@dataclass(frozen=True)
class SplitParams:
    waves: float = 1.0  # target instructions per op ≈ waves * num_sms
    mlp_slices: int | None = None  # None: see mlp_slice_count
    # One-token steps (batch-1 decode) cut the intermediate dim into the fewest K-slices at most this wide
    # (the cuda backend passes what its activation buffer holds at the largest ring; None: the multi-token
    # rule). Fewer slices: fewer down instructions and atomic adds per hidden element, longer rows per
    # page. Measured (same-run A/Bs, docs/PERFORMANCE.md): 8B 4 vs 7 slices 4.248 vs 4.367 ms/token (H200),
    # 5.343 vs 5.382 (H100); 1B 2 vs 4 slices 0.818 vs 0.819 (H200) but 0.980 vs 0.976 (H100).
    one_token_slice_floats: int | None = None
    # ... and cut in whole multiples of this many columns when the intermediate dim divides (the cuda backend:
    # its tensor-core chunk, so every down page of a batch-1 step stays on the tensor cores).
    one_token_slice_unit: int = 1
    # At most this many output floats per instruction (None: no cap): the cuda backend's out buffer. The LM
    # head (sequences x vocab rows) gets more, smaller blocks for several sequences, the fused op (tokens x
    # its heads' columns, staged) more head ranges; the other ops write a few hundred floats at most.
    max_out_floats: int | None = None
    max_attn_splits: int | None = None  # None: enough splits to give every SM attention work
    # True: as many KV splits as make the step's attention instructions one whole wave over the SMs (rounded down);
    # False: the fewest that give every SM one (rounded up, so a few SMs run two back to back and the layer waits
    # for them). Measured (H200, 1B, batch 1, 8 000-token context, same run, docs/PERFORMANCE.md): 1.025 against
    # 1.252 ms/token; the profile's layer span at 32 000 tokens 92 against 137 µs.
    attn_splits_whole_wave: bool = True
    # True: each sequence gets its own KV split count, the wave's attention instructions shared in proportion to the
    # sequences' context pages (seq_attn_splits): in a batch of one long context among short ones, the long one's
    # attention spreads over many SMs instead of the one split per sequence a uniform count leaves it. Equal contexts
    # get the uniform count either way. Measured (H200, 1B, one 32 000-token context among fifteen of 1 000, same
    # run, docs/PERFORMANCE.md): 5.51 / 5.61 against 19.28 / 19.33 ms/step.
    per_seq_splits: bool = True
    # ... where the contexts are that uneven: the longest's pages (a power-of-two bucket) at least this many times the
    # shortest's. A stream is compiled per split tuple, and a server's decoding sequences of similar lengths cross
    # power-of-two page counts one at a time, each crossing a new tuple (a compile on the engine thread) for no gain
    # over the uniform count.
    per_seq_min_ratio: int = 4
    # Cut each KV group's G query heads over up to this many attention instructions when SMs would
    # otherwise idle (None: as many as fill the SMs, at most G; 1: one instruction per group).
    max_attn_head_chunks: int | None = None
    # Attention instructions of a prompt chunk: about this many per SM (None: `waves`). A chunk's query parts are
    # equal token ranges whose causal work grows with their position (the last part of a 2 048-token prompt attends
    # to 16x the keys of the first), so one part per SM leaves the layer waiting for the longest; more parts let
    # the scheduler pack short ones beside long ones (their costs differ: ops/attn_partial.py cost). Measured (H200,
    # 1B, the 2 048-token prompt's kernel makespan, docs/PERFORMANCE.md): the attention phase of a layer 237 against
    # 399 us; with norm_max_tokens 16, 21.7 against 26.0 ms.
    attn_query_waves: float | None = 2.0
    # A split reads at least this many KV pages: short contexts get one attention instruction per
    # (sequence, group) and no reduce hop (the cuda backend's default: DEFAULT_MIN_PAGES_PER_SPLIT, measured).
    min_pages_per_split: int = 1
    embed_bytes_per_instr: int = 1 << 18
    # False: the step has no EMBED; its caller wrote `hidden` (the cuda backend's host path, or the previous step's
    # ARGMAX_REDUCE in an on-device decode loop), and layer 0 waits for nothing.
    embed_in_stream: bool = True
    # Batch-1 steps with short contexts may run ATTN_O_PROJ (attention fused with its O-proj slice)
    # instead of ATTN_PARTIAL + O_PROJ_RESIDUAL: one dependency hop less per layer, but each fused
    # instruction repeats its heads' attention and streams its W_o slice. Whether that pays depends on the
    # model and the device, so it is off here and the cuda backend decides (engine/cuda/fusion.py). The
    # fused attention is never split over KV pages, so it only applies up to `fuse_max_context_pages` pages
    # of context (beyond, each instruction would walk all its group's keys).
    fuse_o_proj: bool = False
    fuse_max_context_pages: int = 16
    # ... and up to this many tokens (None: any). The cuda backend sets it to its CUDA-core page loops' rows of x
    # (csrc/interpreter/config.cuh MAX_TOKENS_PER_MATVEC): the fused op's matvec input is its heads' attention output,
    # which those loops take where it is not whole tensor-core chunks (one 64-wide head). A longer chunk of one
    # sequence takes ATTN_PARTIAL + O_PROJ_RESIDUAL.
    fuse_max_tokens: int | None = None
    # Head ranges per KV group of the fused op (None: see fused_head_ranges).
    fused_head_chunks: int | None = None
    # Tokens one matvec pass takes (the cuda backend's token group: csrc/interpreter/token_groups.cuh; None: any).
    # A step with more tokens (or an LM head with more sequences) runs each weight-streaming instruction group by
    # group over its pages kept in the ring, so its row block must fit `held_pages` pages of `page_bytes`.
    token_group: int | None = None
    # LM heads of 2..this many sequences write their logits straight to global memory (the cuda backend's
    # KernelOptions.lm_head_direct), so the out buffer does not cap their blocks; 0: never.
    lm_head_direct_max_seqs: int = 0
    # Steps of at least this many tokens run their linear layers as TILE_MATMUL tiles (step_builder_tiles.py) where
    # the model's widths take them (None: never; the cuda backend's KernelOptions.tile_matmul), each tile over at
    # most `tile_tokens` of the step's tokens (up to step_builder_tiles.TILE_MAX_TOKENS; more than
    # TILE_NARROW_TOKENS: wide tiles; 64 keeps every tile narrow, for the A/B).
    tile_min_tokens: int | None = None
    tile_tokens: int = 128
    # True: a layer's tiles of one weight block over every token chunk are listed (and so scheduled) together, so the
    # SMs working at once share a few blocks of weights through L2 and each weight comes from HBM about once per step;
    # False: chunk by chunk, every chunk reading the whole matrix again (a 64 MB gate/up of the 1B does not stay in a
    # 50 MB L2 between chunks). Only steps of several token chunks (prefill) differ. Measured (H200, 1B, 2 048-token
    # prefill, two alternating rounds, docs/PERFORMANCE.md): 45.7 / 46.1 ms weight-major against 45.3 / 45.5: no gain,
    # as a tile page is bound by the consumers' loop, not by where its weights come from; kept for the A/B.
    tile_weight_major: bool = False
    # A NORM tile normalises at most this many tokens (None: no cap; the step's tokens over a quarter of the SMs).
    # Every QKV / gate-up tile waits for all of a norm's NORM tiles, and a NORM tile takes its tokens one after
    # another (about 1 us each on an H100): a 2 048-token prompt's 33 NORM tiles of 62 tokens took 67 us each, twice
    # a layer, with most SMs idle behind them; at 16 tokens 20 us (H200; the layer 1 493 against 1 599 us alone).
    norm_max_tokens: int | None = 16
    # Tensor parallelism (ModelDims.tp_world > 1): each all-reduce of the residual is cut into column chunks about
    # this wide (at most TP_FLAG_CHUNKS), one TP_ALLREDUCE each, spread over as many SMs
    tp_chunk_cols: int = 128
    # >= 0: a tensor-parallel rank's argmax-only step (greedy: no logits leave it) computes the LM head over this
    # rank's share of the vocabulary only (tp_vocab_rows) and takes the argmax across the ranks (TP_ARGMAX); -1: the
    # whole vocabulary on every rank (its logits are the model's).
    tp_vocab_rank: int = -1
    held_pages: int = 9
    page_bytes: int = 16384

    def __post_init__(self) -> None:
        if (self.waves <= 0 or self.min_pages_per_split < 1
                or (self.attn_query_waves is not None and self.attn_query_waves <= 0)):
            raise ValueError(f"SplitParams: min_pages_per_split must be >= 1, waves and attn_query_waves > 0, "
                             f"got {self}")
        if self.fuse_max_context_pages < 0:
            raise ValueError(f"SplitParams.fuse_max_context_pages must be >= 0, got {self.fuse_max_context_pages}")
        if self.one_token_slice_unit < 1:
            raise ValueError(f"SplitParams.one_token_slice_unit must be >= 1, got {self.one_token_slice_unit}")
        if self.max_out_floats is not None and self.max_out_floats < 1:
            raise ValueError(f"SplitParams.max_out_floats must be >= 1 or None, got {self.max_out_floats}")
        if self.one_token_slice_floats is not None and self.one_token_slice_floats < 1:
            raise ValueError(f"SplitParams.one_token_slice_floats must be >= 1 or None, got {self.one_token_slice_floats}")
        if self.fused_head_chunks is not None and self.fused_head_chunks < 1:
            raise ValueError(f"SplitParams.fused_head_chunks must be >= 1 or None, got {self.fused_head_chunks}")
        if ((self.tile_min_tokens is not None and self.tile_min_tokens < 1) or self.tile_tokens < 1
                or (self.norm_max_tokens is not None and self.norm_max_tokens < 1)):
            raise ValueError(f"SplitParams: tile_min_tokens and norm_max_tokens >= 1 or None, tile_tokens >= 1; got {self}")
        if self.tp_vocab_rank < -1:
            raise ValueError(f"SplitParams.tp_vocab_rank must be >= -1, got {self.tp_vocab_rank}")
        if (self.token_group is not None and self.token_group < 1) or self.held_pages < 1 or self.page_bytes < 16:
            raise ValueError(f"SplitParams: token_group >= 1 or None, held_pages >= 1, page_bytes >= 16; got {self}")

    def lm_head_uncapped(self, num_seqs: int) -> bool:
        """Whether an LM head of `num_seqs` sequences writes its logits without the out buffer
        (lm_head_direct_max_seqs), so max_out_floats does not cut its blocks."""
        return 2 <= num_seqs <= self.lm_head_direct_max_seqs and not self.grouped(num_seqs)

    def grouped(self, rows_of_x: int) -> bool:
        """Whether a matvec over `rows_of_x` activation rows runs in token groups (its pages held in the ring)."""
        return self.token_group is not None and rows_of_x > self.token_group

    def held_blocks(self, rows: int, unit: int, k: int) -> int:
        """The fewest blocks of whole `unit`s (each unit `unit` weight rows of k elements) that cut `rows` rows so
        every block fits the held pages."""
        per_page = max(1, self.page_bytes // (2 * k))
        units_per_block = max(1, self.held_pages * per_page // unit)
        return -(-(rows // unit) // units_per_block)


@dataclass(frozen=True)
class Plan:
    """Every cut of one step (identical for all layers). Ranges are half-open, in rows / columns."""

    embed: tuple[tuple[int, int], ...]
    qkv: tuple[tuple[int, int, int], ...]  # (row_begin, row_end, kv_group), group-major
    num_splits: int  # the most any sequence has (the o_part / lse_part buffers' first dim)
    attn_heads: tuple[tuple[int, int], ...]  # head ranges within a KV group, one attention instruction each
    q_parts: int  # parts of each sequence's new tokens, one attention instruction each (query_parts)
    o_proj: tuple[tuple[int, int], ...]
    slices: tuple[tuple[int, int], ...]  # MLP K-slices of the intermediate dim
    gate_up: tuple[tuple[int, int, int], ...]  # (i_begin, i_end, slice)
    down_rows: tuple[tuple[int, int], ...]  # each row block is emitted once per slice
    lm_head: tuple[tuple[int, int], ...]
    # Fused batch-1 attention + O-proj (ATTN_O_PROJ); when not fused the two ranges are empty and
    # qkv_copy is all (0, 0).
    fused: bool
    fused_heads: tuple[tuple[int, int], ...]  # head ranges within a KV group
    fused_rows: tuple[tuple[int, int], ...]  # O-proj row blocks; one ATTN_O_PROJ per (group, heads, rows)
    qkv_copy: tuple[tuple[int, int], ...]  # per plan.qkv entry: the hidden columns it copies into mid
    seq_splits: tuple[int, ...] = ()  # each sequence's KV splits (empty: num_splits for every sequence)
    # The step's linear layers as TILE_MATMUL tiles (None: the matvec opcodes above)
    tiles: TilePlan | None = None
    # Column ranges of hidden, one TP_ALLREDUCE each, after every O and down projection (empty: one rank)
    tp_chunks: tuple[tuple[int, int], ...] = ()
    # The LM head covers this rank's share of the vocabulary (SplitParams.tp_vocab_rank): TP_ARGMAX, not ARGMAX_REDUCE
    tp_vocab: bool = False

    def splits_of(self, seq: int) -> int:
        return self.seq_splits[seq] if self.seq_splits else self.num_splits


def _count(units: int, target: float) -> int:
    # Rounded down: one instruction more than there are SMs makes a few SMs run two back to back, which
    # doubles the op's critical path (measured: 136 QKV blocks on 132 SMs cost ≈ 7 µs per layer).
    return max(1, min(units, math.floor(target + 1e-9)))


def mlp_slice_count(d: ModelDims, requested: int | None) -> int:
    """K-slices of the intermediate dim: `requested` (SplitParams.mlp_slices), else about one per 2048
    columns; never more than there are gate/up tiles."""
    n = requested if requested is not None else max(1, round(d.intermediate / 2048))
    return max(1, min(n, d.intermediate // d.gu_tile))


def mlp_slice_cut(d: ModelDims, num_tokens: int, p: SplitParams) -> list[tuple[int, int]]:
    """The MLP K-slices of a step, in gate/up tiles, mlp_slice_count of them; except a one-token step under a
    width budget (SplitParams.one_token_slice_floats, no explicit mlp_slices): the fewest slices whose widest
    fits the budget, cut in whole multiples of the tile and SplitParams.one_token_slice_unit when the
    intermediate dim divides."""
    if num_tokens != 1 or p.one_token_slice_floats is None or p.mlp_slices is not None:
        return partition(0, d.intermediate, mlp_slice_count(d, p.mlp_slices), d.gu_tile)
    unit = math.lcm(d.gu_tile, p.one_token_slice_unit)
    if d.intermediate % unit:
        unit = d.gu_tile
    units = d.intermediate // unit
    n = next((k for k in range(1, units + 1) if -(-units // k) * unit <= p.one_token_slice_floats), units)
    return partition(0, d.intermediate, n, unit)


def fused_head_ranges(d: ModelDims, p: SplitParams, num_tokens: int = 1) -> list[tuple[int, int]]:
    """Head ranges of the fused op within a KV group, each about K = max(128, 2 * head_dim) W_o columns
    (at least 1 range, at most G). Fewer heads per instruction shorten its attention; but one head's
    columns make W_o rows of 128-256 bytes, one bulk copy each, whose pages arrive late. Measured on an
    H200 with W_o as row copies (no panel pages): 1B K = 64 / 128 / 256: 0.992 / 0.950 / 0.974
    ms/token; 8B K = 128 / 256: 5.009 / 4.629. With panel pages one head per instruction (fused_head_chunks =
    G, the cuda backend's choice: engine/cuda/fusion.py) measured best on the 1B: 0.806-0.808 vs two heads
    0.817."""
    k = max(128, 2 * d.head_dim)
    chunks = p.fused_head_chunks if p.fused_head_chunks is not None else round(d.gqa * d.head_dim / k)
    if p.max_out_floats is not None:  # the instruction stages tokens x its heads' columns in out
        chunks = max(chunks, -(-num_tokens * d.gqa * d.head_dim // p.max_out_floats))
    return partition(0, d.gqa, max(1, min(d.gqa, chunks)))


def copy_ranges(hidden: int, parts: int) -> list[tuple[int, int]]:
    """[0, hidden) cut over `parts` instructions (the QKV blocks' copies of hidden into mid): in 4-column
    units (16-byte vectors on the GPU) when there are enough of them, else single columns; parts beyond
    the columns get the empty range (0, 0)."""
    unit = 4 if hidden % 4 == 0 and hidden // 4 >= parts else 1
    n = min(parts, hidden // unit)
    return partition(0, hidden, n, unit) + [(0, 0)] * (parts - n)


def _fused_cuts(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice, num_qkv: int) -> tuple[
        list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
    """(head ranges, row blocks, QKV copy ranges) of the fused path: about waves * num_sms ATTN_O_PROJ."""
    heads = fused_head_ranges(d, p, shape.num_tokens)
    ha = pow2_align(d.hidden)
    per_rows = p.waves * device.num_sms / (shape.num_seqs * d.n_kv * len(heads))
    rows = partition(0, d.hidden, _count(d.hidden // ha, per_rows), ha)
    return heads, rows, copy_ranges(d.hidden, num_qkv)


def make_plan(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice, max_context_pages: int,
              seq_pages: tuple[int, ...] = ()) -> Plan:
    """Every cut of one step; `seq_pages`: each sequence's context pages (read under SplitParams.per_seq_splits)."""
    target = p.waves * device.num_sms
    tok_per_embed = max(1, p.embed_bytes_per_instr // (2 * d.hidden))
    embed = partition(0, shape.num_tokens, math.ceil(shape.num_tokens / tok_per_embed)) if p.embed_in_stream else []

    grouped = p.grouped(shape.num_tokens)

    def blocks(units: int, share: float, rows: int, unit: int, k: int) -> int:
        """About `share` blocks of the op's `units`; in a step of several token groups, at least the blocks whose
        pages fit the ring (each instruction holds its pages across the groups)."""
        held = p.held_blocks(rows, unit, k) if grouped else 1
        return min(units, max(_count(units, share), held))

    qa = pow2_align(d.head_dim)  # even: RoPE partners stay in one block; never straddles a head pair
    per_group = blocks(d.group_rows // qa, target / d.n_kv, d.group_rows, qa, d.hidden)
    qkv = [(a, b, g) for g in range(d.n_kv)
           for a, b in partition(g * d.group_rows, (g + 1) * d.group_rows, per_group, qa)]

    ha = pow2_align(d.hidden)
    o_proj = partition(0, d.hidden, blocks(d.hidden // ha, target, d.hidden, ha, d.q_cols), ha)

    tile = d.gu_tile
    slices = mlp_slice_cut(d, shape.num_tokens, p)
    share = target / len(slices)
    gate_up = [(a, b, j) for j, (lo, hi) in enumerate(slices)  # 2 weight rows (gate, up) per element
               for a, b in partition(lo, hi, blocks((hi - lo) // tile, share, 2 * (hi - lo), 2 * tile, d.hidden), tile)]
    widest = max(hi - lo for lo, hi in slices)
    down_rows = partition(0, d.hidden, blocks(d.hidden // ha, share, d.hidden, ha, widest), ha)

    va = pow2_align(d.vocab)
    v_lo, v_hi = tp_vocab_rows(d, p.tp_vocab_rank, va)
    v_units = (v_hi - v_lo) // va
    lm_blocks = _count(v_units, target)
    # rows x sequences within the out buffer (a token group of them when they run in groups): more blocks
    rows_out = p.token_group if p.grouped(shape.num_seqs) and p.token_group else shape.num_seqs
    if p.max_out_floats is not None and not p.lm_head_uncapped(shape.num_seqs):
        units_per_block = max(1, p.max_out_floats // (rows_out * va))
        lm_blocks = min(v_units, max(lm_blocks, -(-v_units // units_per_block)))
    if p.grouped(shape.num_seqs):
        lm_blocks = min(v_units, max(lm_blocks, p.held_blocks(v_hi - v_lo, va, d.hidden)))
    lm_head = partition(v_lo, v_hi, lm_blocks, va)
    ns = num_attn_splits(d, shape, p, device, max_context_pages)
    fused = fuses_o_proj(shape, p, max_context_pages)
    seq_splits = () if fused else step_seq_splits(d, shape, p, device, seq_pages)
    if seq_splits:
        ns = max(seq_splits)
    heads, rows, copy = _fused_cuts(d, shape, p, device, len(qkv)) if fused else ([], [], [(0, 0)] * len(qkv))
    heads_cut = attn_head_chunks(d, shape, p, device, ns, sum(seq_splits) if seq_splits else None)
    q_parts = 1 if fused else query_parts(d, shape, p, device)
    tiles = None
    if (not fused and p.tile_min_tokens is not None and shape.num_tokens >= p.tile_min_tokens
            and tiles_fit(d)):
        tiles = tile_plan(d, shape, device, p.waves, p.tile_tokens, p.tile_weight_major, p.norm_max_tokens)
        if tiles.lm_rows:  # the LM head as tiles too, over the whole vocabulary: one block each (lm_max / lm_arg)
            lm_head = list(tiles.lm_rows)
            v_lo, v_hi = 0, d.vocab
    return Plan(tuple(embed), tuple(qkv), ns, tuple(heads_cut), q_parts, tuple(o_proj),
                tuple(slices), tuple(gate_up), tuple(down_rows), tuple(lm_head), fused, tuple(heads),
                tuple(rows), tuple(copy), seq_splits, tiles, tp_chunk_cut(d, p), (v_hi - v_lo) < d.vocab)
