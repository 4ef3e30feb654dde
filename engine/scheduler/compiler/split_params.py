"""`SplitParams`: the knobs of how a step is cut into instructions (engine/scheduler/compiler/step_builder_splits.py
and the cut modules it uses read them; the cuda backend sets some from the interpreter's limits)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.scheduler.compiler.step_builder_tiles import TILE_MAX_ROWS, TILE_TALL_ROWS


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
    # Weight rows of the linear layers' tiles where a step's token chunks are wide (step_builder_tiles.py): 128, or 256
    # (tall tiles: each K step's two pages of rows multiply one input stage, a third fewer bytes per product).
    tile_wide_rows: int = 128
    # True: a layer's tiles of one weight block over every token chunk are listed (and so scheduled) together, so the
    # SMs working at once share a few blocks of weights through L2 and each weight comes from HBM about once per step;
    # False: chunk by chunk, every chunk reading the whole matrix again (a 64 MB gate/up of the 1B does not stay in a
    # 50 MB L2 between chunks). Only steps of several token chunks (prefill) differ. Measured (H200, 1B, 2 048-token
    # prefill, two alternating rounds, docs/PERFORMANCE.md): 45.7 / 46.1 ms weight-major against 45.3 / 45.5 when a
    # tile page was bound by the consumers' loop; 22.21 / 22.41 against 22.62 / 24.06 with the page visits waiting on
    # their copies (within this machine's noise); kept for the A/B.
    tile_weight_major: bool = False
    # True: a tiled step with prompt chunks in it takes its LM head as tiles of its sequences' last tokens, as a
    # decode step does; False: the matvec LM_HEAD for such steps (the A/B).
    tile_lm_head_mixed: bool = True
    # True: a step of several sequences with more tokens than sequences and no KV splits deals its attention
    # instructions out over the sequences at run time, by their attention work (engine/instructions/query_units.py,
    # attention_cuts.spread_units); False: each sequence's tokens in query_parts parts (the A/B).
    attn_spread_queries: bool = True
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
        if self.tile_wide_rows not in (TILE_MAX_ROWS, TILE_TALL_ROWS):
            raise ValueError(f"SplitParams.tile_wide_rows must be {TILE_MAX_ROWS} or {TILE_TALL_ROWS}, "
                             f"got {self.tile_wide_rows}")
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
