"""How a step of many tokens cuts its linear layers into TILE_MATMUL tiles (engine/instructions/ops/tile_matmul.py).

A tile is at most TILE_MAX_ROWS weight rows by at most `SplitParams.tile_tokens` tokens, its K columns streamed in
TILE_K_STEP-wide steps: the weights are read once per token chunk instead of once per token group of the matvec
form, and every product runs on the tensor cores. Ops whose output is narrow (O, down: the hidden width) are also
cut over K (their tiles add into hidden), so every op has about `waves * num_sms` tiles.

A chunk of more than TILE_NARROW_TOKENS tokens makes wide tiles (each warpgroup 64 of the tokens against all the
rows: half the page visits of two narrow chunks). Wide tiles of up to TILE_TALL_ROWS rows (`wide_rows`,
SplitParams.tile_wide_rows) are tall on the GPU: each K step's two pages of rows multiply the same input stage, so a
page visit moves 48 KB for twice a 128-row visit's products (csrc/interpreter/tile_streams.cuh).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.instructions.layout import ModelDims, StepShape
from engine.scheduler.compiler.target import TargetDevice

TILE_MAX_ROWS = 128  # weight rows of one tile (csrc/interpreter/tile_streams.cuh TILE_WEIGHT_ROWS)
TILE_K_STEP = 64     # columns per ring page of a tile (csrc/interpreter/tile_streams.cuh TILE_K)
TILE_ROW_UNIT = 16   # a tile's rows are whole tensor-core row blocks
TILE_MAX_TOKENS = 128  # tokens of one wide tile (csrc/interpreter/tile_streams.cuh TILE_WIDE_TOKENS)
TILE_TALL_ROWS = 256  # weight rows of one tall (wide) tile (csrc/interpreter/tile_streams.cuh TILE_TALL_ROWS)
TILE_NARROW_TOKENS = 64  # ... of a narrow one (tile_streams.cuh TILE_TOKENS)
TILE_NORM_MAX_HIDDEN = 8192  # a NORM tile holds a row in its threads' registers (tile_streams.cuh TILE_NORM_VECS)

Range = tuple[int, int]


@dataclass(frozen=True)
class TilePlan:
    """The tiles of every layer (identical for all layers); ranges are half-open."""

    tokens: tuple[Range, ...]  # token chunks: every tile below runs once per chunk
    qkv: tuple[tuple[int, int, int], ...]  # (row_begin, row_end, kv_group), group-major
    o_rows: tuple[Range, ...]
    o_k: tuple[Range, ...]  # K-slices of the attention width: one tile per (row block, slice)
    gate_up: tuple[Range, ...]  # intermediate columns (2 W_gate_up rows each), whole gate/up tile pairs
    down_rows: tuple[Range, ...]
    down_k: tuple[Range, ...]  # K-slices of the intermediate width
    # LM head row blocks (vocabulary ids); empty: LM_HEAD instructions (a vocabulary of no whole row units)
    lm_rows: tuple[Range, ...] = ()
    # NORM tiles' token ranges (each norm of a layer: one instruction per range)
    norm_tokens: tuple[Range, ...] = ()
    # The LM head's sequence chunks (its tiles' "tokens" are sequences: the final norm puts sequence s's last token in
    # row s of its input, engine/instructions/ops/tile_matmul.py), and the final norm's sequence ranges
    lm_seqs: tuple[Range, ...] = ()
    final_norm_seqs: tuple[Range, ...] = ()
    # The order tiles are listed in, which the static schedule follows between equal tiles: True, a weight block's
    # tiles over every token chunk together (SplitParams.tile_weight_major); False, chunk by chunk.
    weight_major: bool = False

    @property
    def tall(self) -> bool:
        """Some tile of the linear layers has more than TILE_MAX_ROWS rows (a tall tile: tile_wide_rows=256)."""
        rows = [b - a for a, b, _g in self.qkv] + [b - a for a, b in self.o_rows + self.down_rows]
        return max(rows + [2 * (b - a) for a, b in self.gate_up]) > TILE_MAX_ROWS

    def ordered(self, blocks: list[tuple[int, ...]],
                chunks: tuple[Range, ...] | None = None) -> list[tuple[tuple[int, ...], Range]]:
        """(weight block, token chunk) pairs of one op in the plan's order (`chunks`: these instead of the step's token
        chunks, e.g. the LM head's sequence chunks)."""
        chunks = self.tokens if chunks is None else chunks
        if self.weight_major:
            return [(b, t) for b in blocks for t in chunks]
        return [(b, t) for t in chunks for b in blocks]


def _cut(lo: int, hi: int, parts: int, unit: int) -> list[Range]:
    n = (hi - lo) // unit
    parts = max(1, min(parts, n))
    cuts = [lo + (k * n // parts) * unit for k in range(parts + 1)]
    return [(cuts[k], cuts[k + 1]) for k in range(parts)]


def tiles_fit(d: ModelDims) -> bool:
    """Whether the model's widths take tiles: whole K steps everywhere, a hidden row a NORM tile holds, KV groups of
    whole row units, gate/up tile pairs that fit one tile."""
    return (d.hidden % TILE_K_STEP == 0 and d.q_cols % TILE_K_STEP == 0 and d.intermediate % TILE_K_STEP == 0
            and d.hidden <= TILE_NORM_MAX_HIDDEN
            and d.group_rows % TILE_ROW_UNIT == 0 and d.hidden % TILE_ROW_UNIT == 0
            and 2 * d.gu_tile <= TILE_MAX_ROWS and (TILE_MAX_ROWS // 2) % d.gu_tile == 0)


def tile_plan(d: ModelDims, shape: StepShape, device: TargetDevice, waves: float, tile_tokens: int,
              weight_major: bool = False, norm_max_tokens: int | None = None,
              wide_rows: int = TILE_MAX_ROWS, lm_head_mixed: bool = True) -> TilePlan:
    """About `waves * num_sms` tiles per op and token chunk; NORM tiles of at most `norm_max_tokens` tokens (None: no
    cap); the linear layers' tiles of at most `wide_rows` rows where every chunk is wide (TILE_MAX_ROWS or
    TILE_TALL_ROWS, as SplitParams checks; the LM head's stay at TILE_MAX_ROWS); the LM head as tiles in steps with
    prompt chunks too unless `lm_head_mixed` is off; tiles_fit(d) must hold."""
    target = waves * device.num_sms

    def chunked(n: int) -> list[Range]:
        return _cut(0, n, math.ceil(n / min(tile_tokens, TILE_MAX_TOKENS)), 1)

    chunks = chunked(shape.num_tokens)
    per_chunk = max(1.0, target / len(chunks))
    wide = min(b - a for a, b in chunks) > TILE_NARROW_TOKENS
    max_rows = wide_rows if wide else TILE_MAX_ROWS

    def blocks(rows: int, want: float) -> int:
        """Row blocks of at most max_rows rows; more, of at least 32 rows, where SMs would idle."""
        fewest = math.ceil(rows / max_rows)
        return max(fewest, min(rows // 32 if rows >= 32 else 1, math.floor(want)))

    per_group = blocks(d.group_rows, per_chunk / d.n_kv)
    qkv = [(a, b, g) for g in range(d.n_kv)
           for a, b in _cut(g * d.group_rows, (g + 1) * d.group_rows, per_group, TILE_ROW_UNIT)]
    rows = _cut(0, d.hidden, math.ceil(d.hidden / max_rows), TILE_ROW_UNIT)
    o_k = _cut(0, d.q_cols, math.floor(per_chunk / len(rows)), TILE_K_STEP)
    down_k = _cut(0, d.intermediate, math.floor(per_chunk / len(rows)), TILE_K_STEP)
    gu = d.gu_tile
    gate_up = _cut(0, d.intermediate, max(math.ceil(2 * d.intermediate / max_rows), math.floor(per_chunk)), gu)
    # The LM head reads one token per sequence: a step with prompt chunks in it (a serving step's mix) multiplies its
    # sequences' last tokens only, in tiles like a decode step's (the matvec LM_HEAD re-read the vocabulary's 262 MB
    # (1B) for each group of 16 sequences: 1.5 ms of a 40-sequence step's 17.9 ms, H200).
    lm_rows: list[Range] = []
    if d.vocab % TILE_ROW_UNIT == 0 and (lm_head_mixed or shape.num_tokens == shape.num_seqs):
        lm_rows = _cut(0, d.vocab, math.ceil(d.vocab / TILE_MAX_ROWS), TILE_ROW_UNIT)
    # A norm reads its tokens' hidden rows once: a quarter of the SMs share it (each range a few tokens), so the
    # tiles waiting for it start after one short hop. The final norm's rows are the sequences' last tokens.
    def norm_ranges(n: int) -> list[Range]:
        norms = max(1, device.num_sms // 4)
        if norm_max_tokens is not None:
            norms = max(norms, math.ceil(n / norm_max_tokens))
        return _cut(0, n, min(n, norms), 1)

    norm_tokens, final_norm_seqs = norm_ranges(shape.num_tokens), norm_ranges(shape.num_seqs)
    return TilePlan(tuple(chunks), tuple(qkv), tuple(rows), tuple(o_k), tuple(gate_up), tuple(rows), tuple(down_k),
                    tuple(lm_rows), tuple(norm_tokens), tuple(chunked(shape.num_seqs)), tuple(final_norm_seqs),
                    weight_major)
