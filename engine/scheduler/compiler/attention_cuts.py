"""How one step's attention is cut into instructions: the fused ATTN_O_PROJ path or not, KV splits (uniform, or per
sequence for uneven contexts), head chunks within a KV group and query parts of a prompt chunk, each sized to the SMs
the others leave (SplitParams' attention fields; make_plan in step_builder_splits.py puts them together)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from engine.instructions.layout import ModelDims, StepShape
from engine.instructions.query_units import MIN_TOKENS_PER_UNIT
from engine.scheduler.compiler.partition import partition
from engine.scheduler.compiler.target import TargetDevice

if TYPE_CHECKING:
    from engine.scheduler.compiler.split_params import SplitParams


def fuses_o_proj(shape: StepShape, p: SplitParams, max_context_pages: int) -> bool:
    """Whether this step runs the fused ATTN_O_PROJ path (batch 1, context and tokens within the fused limits, one
    token group)."""
    return (p.fuse_o_proj and shape.num_seqs == 1 and max_context_pages <= p.fuse_max_context_pages
            and (p.fuse_max_tokens is None or shape.num_tokens <= p.fuse_max_tokens)
            and not p.grouped(shape.num_tokens))


def num_attn_splits(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice,
                    max_context_pages: int) -> int:
    """Enough KV splits to give each SM an attention instruction (with the query parts; attn_splits_whole_wave: no
    more than one each), never more than the pages in use
    (rounded up to a power of two so the stream survives many decode steps); 1 on the fused path."""
    if fuses_o_proj(shape, p, max_context_pages):
        return 1
    tasks = shape.num_seqs * d.n_kv * query_parts(d, shape, p, device)
    want = device.num_sms // tasks if p.attn_splits_whole_wave else math.ceil(device.num_sms / tasks)
    pages = 1 << max(0, math.ceil(math.log2(max(1, max_context_pages))))
    cap = p.max_attn_splits if p.max_attn_splits is not None else want
    return max(1, min(want, pages // p.min_pages_per_split, cap))


def _page_buckets(seq_pages: tuple[int, ...]) -> list[int]:
    return [1 << max(0, math.ceil(math.log2(max(1, n)))) for n in seq_pages]


def step_seq_splits(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice,
                    seq_pages: tuple[int, ...]) -> tuple[int, ...]:
    """The step's per-sequence split counts (seq_attn_splits) where SplitParams.per_seq_splits applies to its
    contexts (uneven by per_seq_min_ratio or more), else () (every sequence the uniform count)."""
    if not p.per_seq_splits or not seq_pages or len(seq_pages) != shape.num_seqs:
        return ()
    buckets = _page_buckets(seq_pages)
    if max(buckets) < p.per_seq_min_ratio * min(buckets):
        return ()
    splits = seq_attn_splits(d, shape, p, device, seq_pages)
    # Every sequence at the uniform count is the uniform stream: one shape key, not two streams of the same work (a
    # server's wide decode steps mix new and old contexts but give each sequence one split: 64 and 128 sequences).
    if all(s == splits[0] for s in splits) and splits[0] == num_attn_splits(d, shape, p, device, max(seq_pages)):
        return ()
    return splits


def seq_attn_splits(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice,
                    seq_pages: tuple[int, ...]) -> tuple[int, ...]:
    """Each sequence's KV splits under SplitParams.per_seq_splits: the wave's split slots (SMs per group and query
    part, as num_attn_splits counts them for one sequence) shared in proportion to the sequences' context pages
    (rounded up to powers of two, as there), at least one each, at most its pages per min_pages_per_split. With equal
    contexts every sequence gets num_attn_splits' count."""
    buckets = _page_buckets(seq_pages)
    den = d.n_kv * query_parts(d, shape, p, device) * sum(buckets)  # a sequence's share: num_sms * b / den

    def share(b: int) -> int:
        return device.num_sms * b // den if p.attn_splits_whole_wave else -(-device.num_sms * b // den)
    cap = p.max_attn_splits
    return tuple(max(1, min(b // p.min_pages_per_split, share(b), cap if cap is not None else b)) for b in buckets)


def attn_head_chunks(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice,
                     num_splits: int, split_slots: int | None = None) -> list[tuple[int, int]]:
    """Head ranges within a KV group: as many as the SMs left idle by (sequence, group, split, query part) allow;
    `split_slots`: the sequences' splits summed, where they differ (else num_splits for each sequence)."""
    slots = split_slots if split_slots is not None else shape.num_seqs * num_splits
    free = device.num_sms // (slots * d.n_kv * query_parts(d, shape, p, device))
    cap = p.max_attn_head_chunks if p.max_attn_head_chunks is not None else d.gqa
    return partition(0, d.gqa, max(1, min(d.gqa, free, cap)))


# A query part gets at least this many tokens on average: below it the part's fixed costs (the queries' and keys'
# first loads) outweigh the parallelism. The run-time dealing of spread units (query_units.py) keeps the same floor.
MIN_TOKENS_PER_QUERY_PART = MIN_TOKENS_PER_UNIT


def spread_units(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice) -> int:
    """Query units per KV group and head range of a step whose attention is spread (engine/instructions/
    query_units.py): one per sequence, and for the tokens past one per sequence, one per MIN_TOKENS_PER_QUERY_PART of
    them up to the SMs a wave leaves per group, but at least as many as there are sequences (a prompt chunk beside
    many decodes gets about as many units as they do: its queries attend to more keys each)."""
    S, extra_tokens = shape.num_seqs, shape.num_tokens - shape.num_seqs
    waves = p.waves if p.attn_query_waves is None else p.attn_query_waves
    wave = math.floor(waves * device.num_sms / d.n_kv)
    return S + min(extra_tokens // MIN_TOKENS_PER_QUERY_PART, max(wave - S, S))


def query_parts(d: ModelDims, shape: StepShape, p: SplitParams, device: TargetDevice) -> int:
    """Parts each sequence's new tokens are cut into for attention (1 for decode steps): up to about
    `waves * num_sms` attention instructions, each part MIN_TOKENS_PER_QUERY_PART tokens or more on average.
    Attention walks its tokens one after another, each with its own round trips, so a prompt chunk's tokens are
    spread first; KV splits and head chunks only take the SMs the parts leave."""
    per_seq = shape.num_tokens // shape.num_seqs
    if per_seq <= 1:
        return 1
    waves = p.waves if p.attn_query_waves is None else p.attn_query_waves
    return max(1, min(per_seq // MIN_TOKENS_PER_QUERY_PART,
                      math.floor(waves * device.num_sms / (shape.num_seqs * d.n_kv))))
