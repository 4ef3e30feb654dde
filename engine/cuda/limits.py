"""What the interpreter's fixed shared-memory plan can run; checked at load time and per stream so an
unsupported model or batch is a clear error, never a wrong answer or a hang on the device."""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from engine.instructions import registry as op
from engine.instructions.head_padding import LANE_HEAD_DIMS
from engine.instructions.layout import ModelDims, pow2_align
from engine.instructions.ops.tile_matmul import TileKind
from engine.scheduler.compiler.step_builder_splits import mlp_slice_count
from engine.scheduler.compiler.step_builder_tiles import (
    TILE_K_STEP, TILE_MAX_ROWS, TILE_MAX_TOKENS, TILE_NARROW_TOKENS, TILE_ROW_UNIT, TILE_TALL_ROWS)

# x stages a tile stream's ring leaves room for (tile_streams.cuh: up to TILE_X_STAGES K steps of x in flight): a tile
# takes its pages in pairs with four or more (tile_matmul.cuh tile_takes_pairs).
TILE_X_STAGES_WANTED = 4
# A narrow tile of at most this many tokens stages its x in boxes of this many rows, half a 64-token stage
# (tile_streams.cuh TILE_SMALL_TOKENS): its four stages take 16 KB, and the ring a page more.
TILE_SMALL_X_TOKENS = 32


PANEL_WIDTHS = (64, 128, 256)  # panel_pages.cuh panel_k_ok: W_o slices (heads * head_dim) taken as panel pages


def row_elems(code: int, a: np.ndarray, d: ModelDims) -> int | None:
    """Length of the weight rows an instruction streams (operands `a` = words 3..), None for ops that stream none."""
    if code in (op.Opcode.RMS_QKV_ROPE_APPEND, op.Opcode.LM_HEAD, op.Opcode.RMS_GATE_UP_SILU):
        return d.hidden
    if code == op.Opcode.O_PROJ_RESIDUAL:
        return d.q_cols
    if code == op.Opcode.DOWN_RESIDUAL:
        return int(a[3] - a[2])
    if code == op.Opcode.ATTN_O_PROJ:  # W_o's columns of the op's heads
        return int(a[3] - a[2]) * d.head_dim
    return None


class UnsupportedOnGPU(ValueError):
    """The model or step does not fit the megakernel's limits (the message says which and why)."""


@dataclass(frozen=True)
class InterpreterLimits:
    page_bytes: int
    x_floats: int  # activation floats at the smallest ring (min_ring_pages)
    out_floats: int
    max_tokens_per_matvec: int
    max_gqa: int
    min_ring_pages: int
    max_ring_pages: int
    consumer_warps: int
    mma_chunk: int = 0  # x of tensor-core matvecs is bf16 (activations.cuh x_is_bf16); 0: count all x as fp32
    short_row_max_k: int = 256  # rows up to this long take the CUDA-core short-row path (dot_short_rows.cuh)
    x_row_skew: int = 8  # bf16 elements between several x rows beyond K (activations.cuh x_pitch)
    # Tokens per step when x holds a whole token group (config.cuh MAX_TOKENS_PER_STEP; token_groups.cuh); 0: a
    # step is one token group
    max_tokens_per_step: int = 0
    # The tensor-core many-query attention's shared rows per head dim, (head dim, rows) pairs for the head dims it runs
    # (64 and 128: ops/attn_partial.cuh, 2 and 4 dims per lane; attention_tiles.cuh tile_scratch_rows: a round's
    # queries and its K / V buffers), and their skew; none: the kernel has no tile path
    attn_tile_rows: tuple[tuple[int, int], ...] = ()
    attn_tile_skew: int = 8
    # x rows one tensor-core matvec takes (config.cuh MAX_TOKEN_GROUP; bf16 x); 0: as max_tokens_per_matvec
    max_token_group: int = 0

    @staticmethod
    def of(module: ModuleType) -> InterpreterLimits:
        return InterpreterLimits(module.PAGE_BYTES, module.X_FLOATS, module.OUT_FLOATS,
                                 module.MAX_TOKENS_PER_MATVEC, module.MAX_GQA, module.MIN_RING_PAGES,
                                 module.MAX_RING_PAGES, module.NUM_CONSUMER_WARPS, module.MMA_CHUNK,
                                 module.SHORT_ROW_MAX_K, module.X_ROW_SKEW, module.MAX_TOKENS_PER_STEP,
                                 tuple(sorted(dict(module.ATTN_TILE_ROWS).items())), module.ATTN_TILE_SKEW,
                                 getattr(module, "MAX_TOKEN_GROUP", 0))

    def x_floats_at(self, ring_pages: int) -> int:
        """Activation floats left when the ring takes `ring_pages` pages of the shared pool (config.cuh)."""
        return self.x_floats - (ring_pages - self.min_ring_pages) * self.page_bytes // 4

    def row_takes_mma(self, k: int) -> bool:
        """Whether one-row page matvecs over weight rows of k elements run on the tensor cores (dot_rows_mma.cuh
        mma_row_ok: longer than the short rows, whole 128-element chunks)."""
        return self.mma_chunk > 0 and k > self.short_row_max_k and k % self.mma_chunk == 0

    def x_bf16(self, nx: int, k: int, bf16_x: bool) -> bool:
        """Whether the kernel keeps this x in bf16 (activations.cuh x_is_bf16: at most a matvec's rows,
        tensor-core K)."""
        return bf16_x and nx <= self.mma_group_cap and self.row_takes_mma(k)

    @property
    def mma_group_cap(self) -> int:
        """x rows a tensor-core matvec takes (config.cuh MAX_TOKEN_GROUP)."""
        return max(self.max_token_group, self.max_tokens_per_matvec)

    def matvec_row_elems(self, words: np.ndarray, d: ModelDims, w_o_panels: bool) -> set[int]:
        """Row lengths of the weight streams of a one-token step's `words` that the row matvec computes
        (consumer_matvec.cuh consume_pages): every weight-streaming op's, except a fused ATTN_O_PROJ's W_o slice
        taken as panel pages (`w_o_panels`: the backend encoded W_o's tensor map; panel_pages.cuh panel_stream,
        which only one-token steps take)."""
        out: set[int] = set()
        for w in words:
            code, k = int(w[0]), row_elems(int(w[0]), w[3:], d)
            if k is not None and not (code == op.Opcode.ATTN_O_PROJ and w_o_panels and k in PANEL_WIDTHS):
                out.add(k)
        return out

    def x_need(self, nx: int, k: int, bf16_x: bool) -> int:
        """Floats of x that nx rows of k elements take (bf16 rows: skewed when several, activations.cuh x_pitch)."""
        if not self.x_bf16(nx, k, bf16_x):
            return nx * k
        return -(-k // 2) if nx == 1 else -(-nx * (k + self.x_row_skew) // 2)

    def one_token_slice_floats(self, d: ModelDims, bf16_x: bool = False) -> int:
        """The widest MLP K-slice (elements) a one-token step should take (SplitParams.one_token_slice_floats):
        what x holds at the largest ring whose x still holds the hidden size, at most a quarter page of floats
        (two down rows per page). `bf16_x`: the kernel runs batch-1 matvecs on the tensor cores (bf16 x)."""
        ring = max((r for r in range(self.min_ring_pages, self.max_ring_pages + 1)
                    if self.x_floats_at(r) >= self.x_need(1, d.hidden, bf16_x)), default=self.min_ring_pages)
        per_float = 2 if bf16_x and self.mma_chunk > 0 else 1
        return max(1, min(per_float * self.x_floats_at(ring), self.page_bytes // 4))

    def attn_scratch_floats(self, heads: int, head_dim: int) -> int:
        """Shared x an ATTN_PARTIAL of `heads` heads needs besides its block-table cache (csrc/interpreter/attention_global.cuh)."""
        return self.consumer_warps * heads * (head_dim + 2) + heads * head_dim

    def check_model(self, d: ModelDims) -> None:
        if d.head_dim not in LANE_HEAD_DIMS:  # stored_head_dim pads every head dim up to the widest one
            raise UnsupportedOnGPU(f"head_dim {d.model_head_dim}: the megakernel runs head dims up to "
                                   f"{LANE_HEAD_DIMS[-1]} (stored as {', '.join(map(str, LANE_HEAD_DIMS))})")
        if d.gqa > self.max_gqa:
            raise UnsupportedOnGPU(f"GQA ratio {d.gqa} (heads {d.n_heads} / kv heads {d.n_kv}) exceeds {self.max_gqa}")
        for name, k in (("hidden_size", d.hidden), ("n_heads*head_dim", d.q_cols)):
            if k % 8 or 2 * k > self.page_bytes:
                raise UnsupportedOnGPU(f"{name} = {k}: weight rows must be a multiple of 8 elements and fit "
                                       f"one {self.page_bytes}-byte page")
        if d.intermediate % 8:
            raise UnsupportedOnGPU(f"intermediate_size {d.intermediate} must be a multiple of 8 (16-byte rows)")
        if d.hidden > self.x_floats:
            raise UnsupportedOnGPU(f"hidden_size {d.hidden} exceeds the activation buffer ({self.x_floats} floats)")

    def token_group(self, d: ModelDims, mlp_slices: int | None = None, bf16_x: bool = False,
                    group_cap: int | None = None) -> int:
        """Tokens the activation buffer holds at once (rows of every matvec input: the hidden size, the attention
        output, an MLP K-slice). `mlp_slices` as in SplitParams (None: the builder's default); `bf16_x`: the kernel
        keeps tensor-core inputs in bf16 (KernelOptions.mma_matvec: half the floats, so the 8B's 4096-wide rows
        fit 8 tokens instead of 4). Where every one of those inputs takes the tensor cores, up to MAX_TOKEN_GROUP
        (at most `group_cap`: KernelOptions.mma_token_group) rows that fit x; else the CUDA cores' 8."""
        widths = (d.hidden, d.q_cols, self._slice_width(d, mlp_slices))
        n = self.max_tokens_per_matvec
        if bf16_x and all(self.row_takes_mma(k) for k in widths):
            n = max(n, min(self.mma_group_cap, group_cap if group_cap is not None else self.mma_group_cap))
        while n > 1 and any(self.x_need(n, k, bf16_x) > self.x_floats for k in widths):
            n -= 1
        return n

    def max_tokens(self, d: ModelDims, mlp_slices: int | None = None, bf16_x: bool = False,
                   group_cap: int | None = None, tiles: bool = False) -> int:
        """Tokens per step: MAX_TOKENS_PER_STEP where the kernel can run the step in token groups (x holds a group
        of at least the CUDA cores' 8 and every op's smallest row block fits the ring: groups_fit), else one token
        group. `tiles`: steps of more than one token group run their linear layers as TILE_MATMUL tiles, so only the
        LM head of a step with more tokens than sequences still runs in token groups (groups_fit's `tiles`)."""
        n = self.token_group(d, mlp_slices, bf16_x, group_cap)
        if (n >= self.max_tokens_per_matvec and self.max_tokens_per_step > n
                and self.groups_fit(d, mlp_slices, tiles)):
            return self.max_tokens_per_step
        return n

    def rows_in_pages(self, k: int, pages: int) -> int:
        """Weight rows of k elements that `pages` pages hold (rows never straddle pages: weight_stream.cuh)."""
        return pages * (self.page_bytes // (2 * k))

    def groups_fit(self, d: ModelDims, mlp_slices: int | None = None, tiles: bool = False) -> bool:
        """Whether a step of several token groups can run: each weight-streaming op keeps its instruction's pages in
        the ring across the groups (token_groups.cuh), so its smallest row block (SplitParams' units) must fit the
        smallest ring; `tiles`: only the LM head's (the rest are tiles in such steps: the 8B's gate/up row pairs of
        4096 columns, 32 rows, do not fit a ring of 18 such rows)."""
        lm_head = (pow2_align(d.vocab), d.hidden)
        units = (lm_head,) if tiles else (
            (pow2_align(d.head_dim), d.hidden), (pow2_align(d.hidden), d.q_cols), (2 * d.gu_tile, d.hidden),
            (pow2_align(d.hidden), self._slice_width(d, mlp_slices)), lm_head)
        return all(rows <= self.rows_in_pages(k, self.min_ring_pages) for rows, k in units)

    @staticmethod
    def _slice_width(d: ModelDims, mlp_slices: int | None) -> int:
        slices = mlp_slice_count(d, mlp_slices)
        return -(-d.intermediate // (slices * d.gu_tile)) * d.gu_tile

    def attn_tile_floats(self, head_dim: int) -> int:
        """x floats the tensor-core many-query attention needs at this head dim (attention_tiles.cuh
        tile_scratch_bytes), 0 where the kernel runs that head dim on the CUDA cores only."""
        return dict(self.attn_tile_rows).get(head_dim, 0) * (head_dim + self.attn_tile_skew) * 2 // 4

    def fit_stream(self, words: np.ndarray, num_tokens: int, num_seqs: int, d: ModelDims,
                   max_ring_pages: int | None = None, bf16_x: bool = False, attn_tiles: bool = False,
                   token_group: int | None = None, lm_direct_max_seqs: int = 0, tile_small_x: bool = True) -> int:
        """Check that every instruction fits the interpreter (weight-streaming rows fit the out buffer, K fits a
        page, inputs fit x) and return the ring size for this stream: the most pages that leave x enough for
        the widest input (batch-1 decode needs a few thousand floats, so its ring grows), at most
        `max_ring_pages` (an experiment knob; never below the smallest ring). `bf16_x`: the kernel keeps
        batch-1 x of tensor-core matvecs in bf16 (KernelOptions.mma_matvec), half the floats. `attn_tiles`
        (KernelOptions.attn_tiles): a step with a prompt chunk keeps x room for the tensor-core attention.
        `token_group`: the rows of x per matvec pass (the backend's token_group; None: the CUDA cores' 8).
        `lm_direct_max_seqs`: an LM head of 2..this many sequences writes its logits to global memory
        (KernelOptions.lm_head_direct), not through the out buffer. `tile_small_x` (KernelOptions.tile_small_x): narrow
        tiles of up to TILE_SMALL_X_TOKENS tokens stage their x in boxes of that many rows."""
        group = token_group or self.max_tokens_per_matvec
        x_need = self.attn_tile_floats(d.head_dim) if attn_tiles and num_tokens > num_seqs else 1
        for w in words:
            code = int(w[0])
            nx = num_seqs if code == op.Opcode.LM_HEAD else num_tokens
            direct = code == op.Opcode.LM_HEAD and 2 <= nx <= min(group, lm_direct_max_seqs)  # one group only
            if nx > group and self.max_tokens_per_step:  # token groups (token_groups.cuh)
                self._check_held_pages(code, w[3:], d)
                nx = group
            x_need = max(x_need, self._x_floats_needed(code, w[3:], nx, d, bf16_x, direct, tile_small_x))
        if x_need > self.x_floats:
            raise UnsupportedOnGPU(f"this step's widest input ({x_need} floats) exceeds the activation buffer "
                                   f"({self.x_floats} floats)")
        spare_pages = (self.x_floats - x_need) * 4 // self.page_bytes
        cap = self.max_ring_pages if max_ring_pages is None else min(max_ring_pages, self.max_ring_pages)
        return max(self.min_ring_pages, min(cap, self.min_ring_pages + spare_pages))

    def _check_held_pages(self, code: int, a: np.ndarray, d: ModelDims) -> None:
        """An instruction of a step of several token groups keeps its weight pages in the ring across the groups:
        they must fit the smallest ring (the kernel records ERR_RING_HOLD otherwise)."""
        if code == op.Opcode.ATTN_O_PROJ:
            raise UnsupportedOnGPU("ATTN_O_PROJ (the fused batch-1 attention) in a step of several token groups")
        k = row_elems(code, a, d)
        if k is None:
            return
        rows = (2 if code == op.Opcode.RMS_GATE_UP_SILU else 1) * int(a[1] - a[0])
        held = self.rows_in_pages(k, self.min_ring_pages)
        if rows > held:
            raise UnsupportedOnGPU(f"{op.Opcode(code).name} block of {rows} rows of {k}: a step of several token "
                                   f"groups keeps them in the ring, which holds {held}")

    def _x_floats_needed(self, code: int, a: np.ndarray, nx: int, d: ModelDims, bf16_x: bool = False,
                         out_direct: bool = False, tile_small_x: bool = True) -> int:
        """Shared x one instruction needs (operands `a` = words 3..; `nx` activation rows); raises when its
        matvec output does not fit the out buffer (unless `out_direct`: it writes to global memory) or its weight rows
        do not fit a page."""
        if code == op.Opcode.ATTN_PARTIAL:
            return self.attn_scratch_floats(int(a[5] - a[4]), d.head_dim) + 1
        if code == op.Opcode.ATTN_O_PROJ:
            return self._attn_o_proj_x(a, nx, d)
        if code == op.Opcode.TILE_MATMUL:
            return self._tile_x(a, tile_small_x)
        k = row_elems(code, a, d)
        if k is None:
            return 1
        rows = (2 if code == op.Opcode.RMS_GATE_UP_SILU else 1) * int(a[1] - a[0])
        if code == op.Opcode.DOWN_RESIDUAL:
            if k % 8 or 2 * k > self.page_bytes or int(a[2]) % 8 or self.x_need(nx, k, bf16_x) > self.x_floats:
                raise UnsupportedOnGPU(f"DOWN_RESIDUAL K-slice [{a[2]}, {a[3]}) does not fit the interpreter "
                                       f"(8-aligned, <= {self.page_bytes // 2} wide, its {nx} rows of x within "
                                       f"{self.x_floats} floats)")
        if not out_direct:
            self._check_out(f"{op.Opcode(code).name} block of {rows} rows x {nx} tokens", nx * rows)
        return self.x_need(nx, k, bf16_x)

    @staticmethod
    def _tile_x(a: np.ndarray, small_x: bool = True) -> int:
        """TILE_MATMUL (operands kind, row_begin, row_end, k_begin, k_end, tok_begin, tok_end, ...): a tile keeps in x
        TILE_X_STAGES_WANTED K steps of its bf16 input as TILE_NARROW_TOKENS rows of 128 bytes (`small_x`:
        TILE_SMALL_X_TOKENS rows for a tile of that many tokens or fewer), twice that for a wide tile, then its products
        (GATE_UP and every wide tile: tokens x (rows + 4) fp32, a tall tile's one half of its rows at a time); its
        blocks must be whole tile units, more than TILE_MAX_ROWS rows only in a wide tile of a linear layer
        (tile_matmul.cuh, tile_wide.cuh). NORM tiles use no x."""
        if int(a[0]) == TileKind.NORM:
            return 1
        rows, k, tokens = int(a[2] - a[1]), int(a[4] - a[3]), int(a[6] - a[5])
        tall_ok = tokens > TILE_NARROW_TOKENS and int(a[0]) != TileKind.LM_HEAD
        if not (TILE_ROW_UNIT <= rows <= (TILE_TALL_ROWS if tall_ok else TILE_MAX_ROWS) and rows % TILE_ROW_UNIT == 0
                and k > 0 and k % TILE_K_STEP == 0 and int(a[3]) % TILE_K_STEP == 0 and 1 <= tokens <= TILE_MAX_TOKENS):
            raise UnsupportedOnGPU(f"TILE_MATMUL of {rows} rows x [{a[3]}, {a[4]}) x {tokens} tokens: tiles take "
                                   f"{TILE_ROW_UNIT}-row multiples up to {TILE_MAX_ROWS} rows ({TILE_TALL_ROWS} in a "
                                   f"wide tile of a linear layer), whole {TILE_K_STEP}-column K steps and at most "
                                   f"{TILE_MAX_TOKENS} tokens")
        stage_tokens = (2 * TILE_NARROW_TOKENS if tokens > TILE_NARROW_TOKENS
                        else TILE_SMALL_X_TOKENS if small_x and tokens <= TILE_SMALL_X_TOKENS else TILE_NARROW_TOKENS)
        return max(TILE_X_STAGES_WANTED * stage_tokens * 128 // 4, tokens * (min(rows, TILE_MAX_ROWS) + 4))

    def _attn_o_proj_x(self, a: np.ndarray, nx: int, d: ModelDims) -> int:
        """ATTN_O_PROJ (operands seq, kv_group, head_begin, head_end, row_begin, row_end) runs its attention
        in x, stages the attention output in `out`, then streams W_o rows of heads * head_dim bf16 columns."""
        heads, rows = int(a[3] - a[2]), int(a[5] - a[4])
        k = heads * d.head_dim
        if (2 * k) % 16 or 2 * k > self.page_bytes:
            raise UnsupportedOnGPU(f"ATTN_O_PROJ over {heads} heads: W_o rows of {k} bf16 must be 16-byte "
                                   f"multiples that fit one {self.page_bytes}-byte page")
        self._check_out(f"ATTN_O_PROJ block of {rows} rows x {nx} tokens (attention output staged: {k} columns)",
                        nx * max(rows, k))
        return max(self.attn_scratch_floats(heads, d.head_dim) + 1, nx * k)

    def _check_out(self, what: str, floats: int) -> None:
        if floats > self.out_floats:
            raise UnsupportedOnGPU(f"{what} exceeds the out buffer ({self.out_floats} floats)")
