// tile_streams.cuh: TILE_MATMUL's streams (engine/instructions/ops/tile_matmul.py): one tile of up to
// TILE_WEIGHT_ROWS weight rows x TILE_TOKENS tokens, its K columns in TILE_K-wide steps, on the tensor cores.
//
// Why: the matvec opcodes take a step's tokens a group of 16 at a time over the same pages, so a step of 64
// sequences re-runs every page's products, input loads and epilogues four times (1B, H200: batch 64 at 13x the
// batch-1 step). A tile reads each weight once per token chunk and multiplies it with all the chunk's tokens at once.
//
// Ring page p of a tile is K step p of its rows: TILE_WEIGHT_ROWS / 32 boxes of 32 rows x TILE_K bf16 (128-byte rows,
// 128-byte swizzle: 16-byte chunk c of row r at chunk c ^ (r % 8)), copied by the loader from the matrix's tensor
// map (Globals::tile_maps) like any weight page, ahead of the instruction. The input's K step arrives the same way,
// copied by consumer thread 0 once the dependencies are met, up to TILE_X_STAGES steps ahead, into x stages in shared
// x: every input is bf16 (QKV, GATE_UP, LM_HEAD: x_bf16, normalised once per token by the NORM tiles; O: attn_bf16,
// which the attention ops write next to their fp32 output; DOWN: act_bf16), and a stage is TILE_TOKENS of its rows
// laid out as a page is, which the two warpgroups multiply with 64 rows of the page each as it lands (wgmma
// m64n64k16, both operands read from shared memory by the tensor cores; tk/wgmma.cuh). Measured (1B, H200, batch 64,
// per GATE_UP page): the products of mma.sync with every warp loading every token's x into registers took 0.9 us of a
// 2 us page, and an fp32 input's copies and conversion 0.6 us more, against the weights' 0.5 us alone.
//
// A tile of more than TILE_TOKENS tokens (up to TILE_WIDE_TOKENS) is wide: each warpgroup takes 64
// of its tokens against all the page's rows (m64n128k16), so a page visit multiplies twice the tokens. Why: a page
// visit costs ~0.86 us whatever its bytes (the consumers' per-page work: waits, barrier, issue, the products' wait;
// 1B, H200, batch 64), so a prompt chunk's time is its tiles' page visits, and wide tiles halve them.
//
// A wide tile of more than TILE_WEIGHT_ROWS rows (up to TILE_TALL_ROWS) is tall: each K step is two ring pages (its
// first 128 rows, then the rest) multiplied with the same x stage, so a visit moves 48 KB for 4.2 MFLOP where a
// 128-row tile moves 32 KB for 2.1 (1B, H200: the 2 048-token prefill's wide visits wait on their copies 42 % of the
// time, at ~6.3 TB/s out of L2; docs/PERFORMANCE.md "What a prefill page visit waits for").
#pragma once

#include "code_size.cuh"

#include "../tk/shared_vec.cuh"
#include "../tk/tensor_map.cuh"
#include "marks.cuh"
#include "state.cuh"

namespace mk::vm {

inline constexpr int TILE_WEIGHT_ROWS = 128;      // weight rows of one tile (step_builder_tiles.py TILE_MAX_ROWS)
inline constexpr int TILE_K = 64;          // K columns per ring page (step_builder_tiles.py TILE_K_STEP)
inline constexpr int TILE_TOKENS = 64;     // tokens of one warpgroup's products, and of a narrow tile
inline constexpr int TILE_WIDE_TOKENS = 128;  // tokens of a wide tile (step_builder_tiles.py TILE_MAX_TOKENS)
inline constexpr int TILE_TALL_ROWS = 2 * TILE_WEIGHT_ROWS;  // rows of a tall tile (step_builder_tiles.py TILE_TALL_ROWS)
inline constexpr int TILE_W_BOX_ROWS = 32;  // the weight maps' boxes: 32 rows x TILE_K bf16
inline constexpr int TILE_X_STAGES = 8;    // most K steps of x in flight (as many as x holds)
inline constexpr int TILE_X_BOX_BYTES = TILE_TOKENS * 128;  // the activation maps' boxes: TILE_TOKENS rows x TILE_K bf16
// A narrow tile of at most TILE_SMALL_TOKENS tokens (decode steps of up to 32 sequences) copies its x in boxes of that
// many rows (the small maps): half the stage, so its four stages leave the ring a page more (engine/cuda/limits.py
// _tile_x; 1B, H200: a batch-32 step 2.106 / 2.193 / 2.246 ms at 11 / 10 / 9 ring pages). The products still read 64
// rows from the stage: rows past the box are whatever follows it in shared memory (the next stage, or past x the out
// buffer), and their products are never read.
inline constexpr int TILE_SMALL_TOKENS = 32;
inline constexpr int TILE_X_SMALL_BOX_BYTES = TILE_SMALL_TOKENS * 128;
// A narrow tile of at most TILE_PACK_ROWS rows (a QKV tile of a decode step: 32 rows of a KV group) packs
// TILE_PACK_STEPS (or 2) K steps into each ring page (KernelOptions.tile_pack_k): page p holds K steps P p .. P p + P - 1
// as boxes of TILE_W_BOX_ROWS rows, one after another. Why: such a tile filled a quarter of each 16 KB page, so the ring
// kept a quarter of its bytes in flight, and each K step paid a page visit (its waits, barrier and products of 64 rows
// for 32); 1B, H200, batch 32: a QKV tile's 32 K steps took 15 us, 0.47 us each.
inline constexpr int TILE_PACK_ROWS = TILE_W_BOX_ROWS;
inline constexpr int TILE_PACK_STEPS = PAGE_BYTES / (TILE_PACK_ROWS * TILE_K * 2);
// Column blocks of 8 weight rows a thread's products hold: narrow, its warpgroup's 64 rows; wide, all 128.
template <bool WIDE>
inline constexpr int TILE_N_BLOCKS = WIDE ? 16 : 8;
inline constexpr int TILE_NORM_VECS = 8;   // float4 of a row per consumer thread in a NORM tile: hidden <= 8192
static_assert(TILE_WEIGHT_ROWS / TILE_W_BOX_ROWS * TILE_W_BOX_ROWS * TILE_K * 2 == PAGE_BYTES, "a page is one K step");
static_assert(TILE_K * 2 == 128, "boxes of 128-byte rows (the 128-byte swizzle)");
static_assert(TILE_PACK_STEPS == 4 && TILE_PACK_ROWS % 8 == 0, "a packed page: four K steps of 32 rows (1 KiB atoms)");
static_assert(TILE_X_STAGES * 8 <= SCRATCH_FLOATS * 4 - 64, "the x stages' barriers sit in scratch");
static_assert(NUM_CONSUMER_WARPS == 8 && TILE_WEIGHT_ROWS == 2 * 64 && TILE_TOKENS == 64 && TILE_WIDE_TOKENS == 128,
              "two warpgroups of 64 x 64 products (wgmma m64n64k16) or, wide, of 64 x 128 (m64n128k16)");
static_assert(TILE_N_BLOCKS<true> * 8 == TILE_WEIGHT_ROWS && TILE_N_BLOCKS<false> * 8 == 64, "8-row column blocks");
static_assert(TILE_X_BOX_BYTES % 1024 == 0 && TILE_X_SMALL_BOX_BYTES % 1024 == 0,
              "the x boxes start on 1 KiB swizzle atoms");
static_assert(TILE_SMALL_TOKENS < TILE_TOKENS && OUT_FLOATS * 4 >= TILE_X_BOX_BYTES - TILE_X_SMALL_BOX_BYTES,
              "a small stage is a narrow one's first rows; the last stage's products read no further than out's end");

// The kinds (TileKind, NormOf) and the maps of Globals::tile_maps (encode_tile_maps, interpreter.cu): the kind's
// weight map is tile_maps[kind], its input's one of the three input maps. LM_HEAD's instructions (and the final
// norm's) have layer -1 (its matrix is not per layer).
enum TileKindCode : int { TILE_QKV = 0, TILE_O = 1, TILE_GATE_UP = 2, TILE_DOWN = 3, TILE_LM_HEAD = 4, TILE_NORM = 5 };
enum TileNormCode : int { NORM_ATTN = 0, NORM_MLP = 1, NORM_FINAL = 2 };
enum TileMapIndex : int {
  TILE_MAP_X_BF16 = 5,
  TILE_MAP_X_ATTN_OUT = 6,
  TILE_MAP_X_ACT = 7,
  TILE_MAP_SMALL_OFFSET = 3,  // the same three inputs in boxes of TILE_SMALL_TOKENS rows: maps 8, 9, 10
  NUM_TILE_MAPS = 11
};

struct TileOperands {
  int kind, row_begin, rows, k_begin, k_steps, tok_begin, tokens;
  __device__ __forceinline__ explicit TileOperands(const int* w)
      : kind(w[W_OPERANDS]), row_begin(w[W_OPERANDS + 1]), rows(w[W_OPERANDS + 2] - w[W_OPERANDS + 1]),
        k_begin(w[W_OPERANDS + 3]), k_steps((w[W_OPERANDS + 4] - w[W_OPERANDS + 3]) / TILE_K),
        tok_begin(w[W_OPERANDS + 5]), tokens(w[W_OPERANDS + 6] - w[W_OPERANDS + 5]) {}
  __device__ __forceinline__ int x_map(const Globals& g) const {
    const int m = kind == TILE_O ? TILE_MAP_X_ATTN_OUT : kind == TILE_DOWN ? TILE_MAP_X_ACT : TILE_MAP_X_BF16;
    return small(g) ? m + TILE_MAP_SMALL_OFFSET : m;
  }
  // ... from its operand words alone (a weight stream's inputs: StreamInputs::a is the instruction's W_OPERANDS on).
  __device__ __forceinline__ static TileOperands of_operands(const int* a) { return TileOperands(a - W_OPERANDS); }
  // Each warpgroup takes 64 of the tokens against all rows.
  __device__ __forceinline__ bool wide() const { return tokens > TILE_TOKENS; }
  // A narrow tile whose x stages are boxes of TILE_SMALL_TOKENS rows (KernelOptions.tile_small_x).
  __device__ __forceinline__ bool small(const Globals& g) const {
    return g.tile_small_x && tokens <= TILE_SMALL_TOKENS;
  }
  // Each K step is two ring pages of rows (the host makes such tiles wide only).
  __device__ __forceinline__ bool tall() const { return rows > TILE_WEIGHT_ROWS; }
  // Half h of a tall tile's rows (rows [128 h, ...)) as a tile of its own: its epilogue's operands.
  __device__ __forceinline__ TileOperands rows_half(int h) const {
    TileOperands half = *this;
    half.row_begin += h * TILE_WEIGHT_ROWS;
    half.rows = min(TILE_WEIGHT_ROWS, rows - h * TILE_WEIGHT_ROWS);
    return half;
  }
};

// Rows of one layer of the kind's matrix (its weight map stacks the layers).
__device__ __forceinline__ long long tile_layer_rows(const Globals& g, int kind) {
  if (kind == TILE_QKV) return (long long)g.n_kv * (g.n_heads / g.n_kv + 2) * g.head_dim;
  if (kind == TILE_LM_HEAD) return g.vocab;
  return kind == TILE_GATE_UP ? 2LL * g.intermediate : g.hidden_size;
}

// The matrix's first row of the instruction's layer (LM_HEAD: layer -1, one matrix).
__device__ __forceinline__ long long tile_first_row(const Globals& g, const int* w, int kind) {
  return max(w[W_LAYER], 0) * tile_layer_rows(g, kind);
}

__device__ __forceinline__ bool tile_stream(const int* w) { return w[W_OPCODE] == OP_TILE_MATMUL; }

// Controller, one lane, after store_slot_stream: a tile of a padded step's dead tokens only (StepArgs::live_end of
// the last sequence, where the padding's tokens are) streams no pages and its slot names no tokens, which the op
// reads as nothing to do (the step args are read once, here, off the consumers' path). Tiles over sequences (the LM
// head's, the final norm's) always run.
__device__ __forceinline__ void skip_dead_tile(const Globals& g, int* slot) {
  if (slot[W_OPCODE] != OP_TILE_MATMUL) return;
  const int kind = slot[W_OPERANDS];
  if (kind == TILE_LM_HEAD || (kind == TILE_NORM && slot[W_OPERANDS + 7] == NORM_FINAL)) return;
  const StepArgs sa(g);
  if (slot[W_OPERANDS + 5] < sa.live_end(sa.num_seqs() - 1)) return;
  slot[W_SLOT_NUM_PAGES] = 0;
  slot[W_OPERANDS + 6] = slot[W_OPERANDS + 5];  // tok_end = tok_begin: no tokens
}

// An input's stage: a box of TILE_TOKENS rows of 128 bytes, one per warpgroup's tokens in a wide tile, and of
// TILE_SMALL_TOKENS rows in a small one.
__device__ __forceinline__ int tile_x_box_bytes(const Globals& g, const TileOperands& t) {
  return t.small(g) ? TILE_X_SMALL_BOX_BYTES : TILE_X_BOX_BYTES;
}
__device__ __forceinline__ int tile_stage_bytes(const Globals& g, const TileOperands& t) {
  return (t.wide() ? 2 : 1) * tile_x_box_bytes(g, t);
}

// K steps of x in flight: as many stages of `stage_bytes` as `x_floats` floats of x hold, at most TILE_X_STAGES, at
// least one.
__device__ __forceinline__ int tile_x_stages(int x_floats, int stage_bytes) {
  return max(1, min(TILE_X_STAGES, x_floats * 4 / stage_bytes));
}
__device__ __forceinline__ int tile_x_stages(const Shared& sm, int stage_bytes) {
  return tile_x_stages(sm.x_floats, stage_bytes);
}

// K steps per ring page of tile t: TILE_PACK_STEPS where x holds twice that many of its stages, else 2 where it holds
// four, else 1 (not packed). A visit waits for its K steps' stages and refills the previous visit's, so the stages in
// flight must cover two visits. Read by the loader (its page count, each page's boxes) and by the consumers (their
// loop, TileShared's stages): both from the launch's ring size and the same stage rule, so they agree.
__device__ __forceinline__ int tile_pack(const Globals& g, const TileOperands& t) {
  if (!g.tile_pack_k || t.kind == TILE_NORM || t.rows > TILE_PACK_ROWS || t.wide()) return 1;
  const int stages = tile_x_stages(x_floats(g.ring_pages), tile_stage_bytes(g, t));
  if (stages >= 2 * TILE_PACK_STEPS && t.k_steps % TILE_PACK_STEPS == 0) return TILE_PACK_STEPS;
  return stages >= 4 && t.k_steps % 2 == 0 ? 2 : 1;
}

// Loader lane: arm the page on `full` (publishing `position` as issued) and copy page p of w's rows: K step p, or of a
// tall tile K step p / 2, rows 128 (p % 2) on, or of a packed one its K steps P p .. P p + P - 1 (tile_pack).
__device__ __forceinline__ void issue_tile_page(const Globals& g, uint32_t* ring_issued, const int* w, int p,
                                                uint8_t* dst, tk::semaphore& full, uint32_t position) {
  const TileOperands t(w);
  if (const int P = tile_pack(g, t); P > 1) {  // K steps P p ..: one box each
    tk::arrive_expect_tx(full, P * TILE_W_BOX_ROWS * TILE_K * 2);
    tk::store_release_shared(ring_issued, position + 1);
    const int row = (int)tile_first_row(g, w, t.kind) + t.row_begin;
    MK_ROLLED
    for (int kk = 0; kk < P; ++kk)
      tk::tensor_load_2d<tk::cache_hint::evict_first>(dst + kk * TILE_W_BOX_ROWS * TILE_K * 2, g.tile_maps + t.kind,
                                                      row, t.k_begin + (p * P + kk) * TILE_K, full);
    return;
  }
  const int step = t.tall() ? p >> 1 : p, r0 = t.tall() ? (p & 1) * TILE_WEIGHT_ROWS : 0;
  const int boxes = (min(TILE_WEIGHT_ROWS, t.rows - r0) + TILE_W_BOX_ROWS - 1) / TILE_W_BOX_ROWS;
  tk::arrive_expect_tx(full, boxes * TILE_W_BOX_ROWS * TILE_K * 2);
  tk::store_release_shared(ring_issued, position + 1);  // after arming: see wait_page_issued
  const int row = (int)tile_first_row(g, w, t.kind) + t.row_begin + r0;
  MK_ROLLED
  for (int b = 0; b < boxes; ++b)
    tk::tensor_load_2d<tk::cache_hint::evict_first>(dst + b * TILE_W_BOX_ROWS * TILE_K * 2, g.tile_maps + t.kind,
                                                    row + b * TILE_W_BOX_ROWS, t.k_begin + step * TILE_K, full);
}

// Shared x during a tile: the stages are its input's K steps, TILE_TOKENS rows of 128 bytes each (16-byte chunk c of
// token t at chunk c ^ (t % 8), as TMA's 128-byte swizzle writes them: the layout wgmma reads; a wide tile's stage is
// two such boxes, one per warpgroup).
struct TileShared {
  uint8_t* x;       // the stages (generic address, for the copies)
  uint32_t stages;  // ... (shared-window address, for the products)
  int box_bytes, stage_bytes, n_stages;  // a stage is one box, or two in a wide tile
  tk::semaphore* bars;  // one per stage, in scratch
  __device__ __forceinline__ TileShared(const Globals& g, const Shared& sm, const TileOperands& t)
      : x(reinterpret_cast<uint8_t*>(sm.x)), stages(tk::smem_addr(sm.x)), box_bytes(tile_x_box_bytes(g, t)),
        stage_bytes(tile_stage_bytes(g, t)), n_stages(tile_x_stages(sm, stage_bytes)),
        bars(reinterpret_cast<tk::semaphore*>(sm.scratch)) {}
};

// Consumer thread 0: copy K step `step` of the tile's tokens into stage `s`, a box of TILE_TOKENS rows per
// warpgroup's tokens, or one of TILE_SMALL_TOKENS rows (rows past the activations' read as zeros).
__device__ __forceinline__ void issue_tile_x(const Globals& g, const TileShared& ts, const TileOperands& t, int step,
                                             int s) {
  tk::semaphore& bar = ts.bars[s];
  tk::arrive_expect_tx(bar, ts.stage_bytes);
  const CUtensorMap* map = g.tile_maps + t.x_map(g);
  uint8_t* base = ts.x + s * ts.stage_bytes;
  MK_ROLLED
  for (int b = 0; b * ts.box_bytes < ts.stage_bytes; ++b)
    tk::tensor_load_2d(base + b * ts.box_bytes, map, t.tok_begin + b * TILE_TOKENS, t.k_begin + step * TILE_K, bar);
}

}  // namespace mk::vm
