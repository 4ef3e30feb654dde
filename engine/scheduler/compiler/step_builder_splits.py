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
                                                      spread_units, step_seq_splits)
from engine.scheduler.compiler.partition import partition
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_tiles import TilePlan, tile_plan, tiles_fit
from engine.scheduler.compiler.target import TargetDevice
from engine.scheduler.compiler.tensor_parallel_cuts import tp_chunk_cut, tp_vocab_rows


@dataclass(frozen=True)
class Plan:
    """Every cut of one step (identical for all layers). Ranges are half-open, in rows / columns."""

    embed: tuple[tuple[int, int], ...]
    qkv: tuple[tuple[int, int, int], ...]  # (row_begin, row_end, kv_group), group-major
    num_splits: int  # the most any sequence has (the o_part / lse_part buffers' first dim)
    attn_heads: tuple[tuple[int, int], ...]  # head ranges within a KV group, one attention instruction each
    q_parts: int  # parts of each sequence's new tokens, one attention instruction each (query_parts); spread: units
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
    # The attention instructions are the step's q_parts query units, dealt out over the sequences at run time
    # (engine/instructions/query_units.py; SplitParams.attn_spread_queries)
    spread: bool = False

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
    spread = (p.attn_spread_queries and not fused and ns == 1 and not seq_splits
              and 1 < shape.num_seqs < shape.num_tokens)
    if spread:
        q_parts = spread_units(d, shape, p, device)
    tiles = None
    if (not fused and p.tile_min_tokens is not None and shape.num_tokens >= p.tile_min_tokens
            and tiles_fit(d)):
        tiles = tile_plan(d, shape, device, p.waves, p.tile_tokens, p.tile_weight_major, p.norm_max_tokens,
                          p.tile_wide_rows, p.tile_lm_head_mixed)
        if tiles.lm_rows:  # the LM head as tiles too, over the whole vocabulary: one block each (lm_max / lm_arg)
            lm_head = list(tiles.lm_rows)
            v_lo, v_hi = 0, d.vocab
    return Plan(tuple(embed), tuple(qkv), ns, tuple(heads_cut), q_parts, tuple(o_proj),
                tuple(slices), tuple(gate_up), tuple(down_rows), tuple(lm_head), fused, tuple(heads),
                tuple(rows), tuple(copy), seq_splits, tiles, tp_chunk_cut(d, p), (v_hi - v_lo) < d.vocab, spread)
