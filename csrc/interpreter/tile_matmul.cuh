// tile_matmul.cuh: TILE_MATMUL's streams and products (engine/instructions/ops/tile_matmul.py): one tile of up to
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
// x: for QKV, GATE_UP, LM_HEAD (x_bf16, normalised once per token by the NORM tiles) and DOWN (act_bf16) a stage is
// TILE_TOKENS bf16 rows laid out as a page is, and the two warpgroups multiply it with 64 rows of the page each
// (wgmma m64n64k16, both operands read from shared memory by the tensor cores; tk/wgmma.cuh); O's input (the
// attention output, fp32) is converted to such a copy first. Measured (1B, H200, batch 64, per GATE_UP page): the
// products of mma.sync with every warp loading every token's x into registers took 0.9 us of a 2 us page, and the
// fp32 input's copies and conversion 0.6 us more, against the weights' 0.5 us alone.
//
// A tile of more than TILE_TOKENS tokens (up to TILE_WIDE_TOKENS; bf16 inputs only) is wide: each warpgroup takes 64
// of its tokens against all the page's rows (m64n128k16), so a page visit multiplies twice the tokens. Why: a page
// visit costs ~0.86 us whatever its bytes (the consumers' per-page work: waits, barrier, issue, the products' wait;
// 1B, H200, batch 64), so a prompt chunk's time is its tiles' page visits, and wide tiles halve them.
#pragma once

#include "code_size.cuh"

#include "../tk/shared_vec.cuh"
#include "../tk/tensor_map.cuh"
#include "../tk/wgmma.cuh"
#include "marks.cuh"
#include "state.cuh"

namespace mk::vm {

inline constexpr int TILE_WEIGHT_ROWS = 128;      // weight rows of one tile (step_builder_tiles.py TILE_MAX_ROWS)
inline constexpr int TILE_K = 64;          // K columns per ring page (step_builder_tiles.py TILE_K_STEP)
inline constexpr int TILE_TOKENS = 64;     // tokens of one warpgroup's products, and of a narrow tile
inline constexpr int TILE_WIDE_TOKENS = 128;  // tokens of a wide tile (step_builder_tiles.py TILE_MAX_TOKENS)
inline constexpr int TILE_W_BOX_ROWS = 32;  // the weight maps' boxes: 32 rows x TILE_K bf16
inline constexpr int TILE_X_BOX_ROWS = 16;  // the activation maps' boxes: 16 tokens x TILE_X_BOX_COLS fp32
inline constexpr int TILE_X_BOX_COLS = 32;
inline constexpr int TILE_X_STAGES = 8;    // most K steps of x in flight (as many as x holds)
inline constexpr int TILE_STAGING = 2;     // bf16 copies of a K step (TileShared)
inline constexpr int TILE_STAGING_BYTES = TILE_TOKENS * 128;
// Column blocks of 8 weight rows a thread's products hold: narrow, its warpgroup's 64 rows; wide, all 128.
template <bool WIDE>
inline constexpr int TILE_N_BLOCKS = WIDE ? 16 : 8;
inline constexpr int TILE_NORM_VECS = 8;   // float4 of a row per consumer thread in a NORM tile: hidden <= 8192
static_assert(TILE_WEIGHT_ROWS / TILE_W_BOX_ROWS * TILE_W_BOX_ROWS * TILE_K * 2 == PAGE_BYTES, "a page is one K step");
static_assert(TILE_K * 2 == 128 && TILE_X_BOX_COLS * 4 == 128, "boxes of 128-byte rows (the 128-byte swizzle)");
static_assert(TILE_K == 2 * TILE_X_BOX_COLS, "two x boxes per K step");
static_assert(TILE_K == 4 * 16 && TILE_TOKENS * 4 == CONSUMER_THREADS, "a thread converts 16 columns of one token");
static_assert(TILE_X_STAGES * 8 <= SCRATCH_FLOATS * 4 - 64, "the x stages' barriers sit in scratch");
static_assert(NUM_CONSUMER_WARPS == 8 && TILE_WEIGHT_ROWS == 2 * 64 && TILE_TOKENS == 64 && TILE_WIDE_TOKENS == 128,
              "two warpgroups of 64 x 64 products (wgmma m64n64k16) or, wide, of 64 x 128 (m64n128k16)");
static_assert(TILE_N_BLOCKS<true> * 8 == TILE_WEIGHT_ROWS && TILE_N_BLOCKS<false> * 8 == 64, "8-row column blocks");
static_assert(TILE_STAGING_BYTES % 1024 == 0, "the copies start on 1 KiB swizzle atoms");

// The kinds (TileKind, NormOf) and the maps of Globals::tile_maps (encode_tile_maps, interpreter.cu): the kind's
// weight map is tile_maps[kind], its input's one of the three input maps. LM_HEAD's instructions (and the final
// norm's) have layer -1 (its matrix is not per layer).
enum TileKindCode : int { TILE_QKV = 0, TILE_O = 1, TILE_GATE_UP = 2, TILE_DOWN = 3, TILE_LM_HEAD = 4, TILE_NORM = 5 };
enum TileNormCode : int { NORM_ATTN = 0, NORM_MLP = 1, NORM_FINAL = 2 };
enum TileMapIndex : int { TILE_MAP_X_BF16 = 5, TILE_MAP_X_ATTN_OUT = 6, TILE_MAP_X_ACT = 7, NUM_TILE_MAPS = 8 };

struct TileOperands {
  int kind, row_begin, rows, k_begin, k_steps, tok_begin, tokens;
  __device__ __forceinline__ explicit TileOperands(const int* w)
      : kind(w[W_OPERANDS]), row_begin(w[W_OPERANDS + 1]), rows(w[W_OPERANDS + 2] - w[W_OPERANDS + 1]),
        k_begin(w[W_OPERANDS + 3]), k_steps((w[W_OPERANDS + 4] - w[W_OPERANDS + 3]) / TILE_K),
        tok_begin(w[W_OPERANDS + 5]), tokens(w[W_OPERANDS + 6] - w[W_OPERANDS + 5]) {}
  __device__ __forceinline__ int x_map() const {
    return kind == TILE_O ? TILE_MAP_X_ATTN_OUT : kind == TILE_DOWN ? TILE_MAP_X_ACT : TILE_MAP_X_BF16;
  }
  // The input is stored in bf16 (x_bf16 or act_bf16): its copies are the products' operand as they land.
  __device__ __forceinline__ bool bf16_input() const { return kind != TILE_O; }
  // Each warpgroup takes 64 of the tokens against all rows (the host cuts such tiles for bf16 inputs only).
  __device__ __forceinline__ bool wide() const { return tokens > TILE_TOKENS; }
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

// Loader lane: arm the page on `full` (publishing `position` as issued) and copy K step p of w's rows.
__device__ __forceinline__ void issue_tile_page(const Globals& g, uint32_t* ring_issued, const int* w, int p,
                                                uint8_t* dst, tk::semaphore& full, uint32_t position) {
  const TileOperands t(w);
  const int boxes = (t.rows + TILE_W_BOX_ROWS - 1) / TILE_W_BOX_ROWS;
  tk::arrive_expect_tx(full, boxes * TILE_W_BOX_ROWS * TILE_K * 2);
  tk::store_release_shared(ring_issued, position + 1);  // after arming: see wait_page_issued
  const int row = (int)tile_first_row(g, w, t.kind) + t.row_begin;
  MK_ROLLED
  for (int b = 0; b < boxes; ++b)
    tk::tensor_load_2d<tk::cache_hint::evict_first>(dst + b * TILE_W_BOX_ROWS * TILE_K * 2, g.tile_maps + t.kind,
                                                    row + b * TILE_W_BOX_ROWS, t.k_begin + p * TILE_K, full);
}

// Shared x during a tile. A bf16 input: the stages are its K steps, TILE_TOKENS rows of 128 bytes each (16-byte chunk
// c of token t at chunk c ^ (t % 8), as TMA's 128-byte swizzle writes them: the layout wgmma reads; a wide tile's
// stage is two such boxes, one per warpgroup). O's fp32 input:
// TILE_STAGING bf16 copies first (the products read one while the next K step is converted into the other), then the
// fp32 stages (two boxes of 32 columns per 16 tokens).
struct TileShared {
  uint8_t* x;                // the stages (generic address, for the copies)
  uint32_t stages, staging;  // shared-window addresses (staging: O's copies)
  int stage_bytes, n_stages;
  tk::semaphore* bars;  // one per stage, in scratch
  __device__ __forceinline__ TileShared(const Shared& sm, int tok_pad, bool bf16_input, bool wide) {
    const int copies = bf16_input ? 0 : TILE_STAGING * TILE_STAGING_BYTES;
    stage_bytes = bf16_input ? (wide ? 2 : 1) * TILE_STAGING_BYTES : 2 * tok_pad * 128;
    n_stages = max(1, min(TILE_X_STAGES, (sm.x_floats * 4 - copies) / stage_bytes));
    staging = tk::smem_addr(sm.x);
    stages = staging + copies;
    x = reinterpret_cast<uint8_t*>(sm.x) + copies;
    bars = reinterpret_cast<tk::semaphore*>(sm.scratch);
  }
};

// Consumer thread 0: copy K step `step` of the tile's tokens into stage `s` (a bf16 input: a box of TILE_TOKENS rows
// per warpgroup's tokens, rows past the activations' read as zeros).
__device__ __forceinline__ void issue_tile_x(const Globals& g, const TileShared& ts, const TileOperands& t, int tok_pad,
                                             int step, int s) {
  tk::semaphore& bar = ts.bars[s];
  tk::arrive_expect_tx(bar, ts.stage_bytes);
  const CUtensorMap* map = g.tile_maps + t.x_map();
  uint8_t* base = ts.x + s * ts.stage_bytes;
  if (t.bf16_input()) {
    MK_ROLLED
    for (int b = 0; b * TILE_STAGING_BYTES < ts.stage_bytes; ++b)
      tk::tensor_load_2d(base + b * TILE_STAGING_BYTES, map, t.tok_begin + b * TILE_TOKENS, t.k_begin + step * TILE_K,
                         bar);
    return;
  }
  MK_ROLLED
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < tok_pad; r += TILE_X_BOX_ROWS)
      tk::tensor_load_2d(base + h * tok_pad * 128 + r * 128, map, t.tok_begin + r,
                         t.k_begin + step * TILE_K + h * TILE_X_BOX_COLS, bar);
}

// O's input: 16 fp32 of row `tt` (columns 16q .. 16q + 15 of the stage's K step) -> bf16 in the staging copy.
__device__ __forceinline__ void convert_tile_x(uint32_t stage, uint32_t staging, int tok_pad, int tt, int q) {
  const int h = q >> 1, cb = (q & 1) * 4;
  const uint32_t row = stage + h * tok_pad * 128 + tt * 128;
  uint32_t packed[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float4 v = tk::load_shared_f4(row + (((cb + j) ^ (tt & 7)) << 4));
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    packed[2 * j] = *reinterpret_cast<const uint32_t*>(&lo);
    packed[2 * j + 1] = *reinterpret_cast<const uint32_t*>(&hi);
  }
  const uint32_t dst = staging + tt * 128;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const uint32_t at = dst + (((2 * q + c) ^ (tt & 7)) << 4);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(packed[4 * c]), "r"(packed[4 * c + 1]),
                 "r"(packed[4 * c + 2]), "r"(packed[4 * c + 3])
                 : "memory");
  }
  // The products read the copy through the async proxy (wgmma): these generic stores must be visible to it.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Which products a consumer thread holds (tk::wgmma_m64n64k16_bf16's layout, tokens as rows and weight rows as
// columns): acc[j][2 h + e] is token tok0 + lane / 4 + 8 h at page row row0 + 8 j + 2 (lane % 4) + e.
// Narrow: warpgroup wg takes page rows 64 wg .. 64 wg + 63 for every token; wide: tokens 64 wg .. 64 wg + 63 for every
// row. `active`: the tile has rows (narrow) or tokens (wide) there.
struct TileLanes {
  int wg, row0, tok0;
  bool active;
  __device__ __forceinline__ TileLanes(int warp, const TileOperands& t)
      : wg(warp / 4), row0(t.wide() ? 0 : 64 * wg), tok0((t.wide() ? 64 * wg : 0) + 16 * (warp % 4)),
        active(64 * wg < (t.wide() ? t.tokens : t.rows)) {}
};

// The four wgmma of one K step (a, b: the input's and the page's descriptors) into acc, inside the caller's group.
template <bool WIDE>
__device__ __forceinline__ void tile_k_step(uint64_t a, uint64_t b, float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
#pragma unroll
  for (int kk = 0; kk < TILE_K / 16; ++kk) {
    if constexpr (WIDE) {
      tk::wgmma_m64n128k16_bf16(acc, a + 2 * kk, b + 2 * kk);
    } else {
      tk::wgmma_m64n64k16_bf16(acc, a + 2 * kk, b + 2 * kk);
    }
  }
}

// This warpgroup's products of one K step: acc += its 64 tokens of the input at a_addr (64 x TILE_K) times the page's
// rows at b_addr (narrow: its 64 rows; wide: all 128), four wgmma of 16 columns, committed as one group (the caller
// waits). Both warpgroups multiply whether or not the tile has rows (narrow) or tokens (wide) in the second's half
// (those products are never read): a branch around wgmma makes ptxas serialise every product (C7520).
template <bool WIDE>
__device__ __forceinline__ void tile_step_products(uint32_t a_addr, uint32_t b_addr,
                                                   float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
  tk::wgmma_fence();
  tile_k_step<WIDE>(tk::wgmma_desc_sw128(a_addr), tk::wgmma_desc_sw128(b_addr), acc);
  tk::wgmma_commit();
}

// ... of a pair of K steps (a_addr0 / b_addr0, then a_addr1 / b_addr1): eight wgmma committed as one group.
template <bool WIDE>
__device__ __forceinline__ void tile_pair_products(uint32_t a_addr0, uint32_t b_addr0, uint32_t a_addr1,
                                                   uint32_t b_addr1, float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
  tk::wgmma_fence();
  tile_k_step<WIDE>(tk::wgmma_desc_sw128(a_addr0), tk::wgmma_desc_sw128(b_addr0), acc);
  tile_k_step<WIDE>(tk::wgmma_desc_sw128(a_addr1), tk::wgmma_desc_sw128(b_addr1), acc);
  tk::wgmma_commit();
}

// Whether a tile takes its pages in pairs (KernelOptions.tile_page_pairs): a bf16 input, an even number of K steps,
// and at least four x stages (a pair's two stages are refilled after the next pair's barrier, so the pair after that
// must already be in flight). Why pairs: a page visit's fixed work (the waits, the CTA barrier, thread 0's release
// and x copy, the products' issue and their wait with nothing overlapping) is about as long as a narrow tile's
// products; a pair pays it once for twice the products.
__device__ __forceinline__ bool tile_takes_pairs(const Globals& g, const Shared& sm, const TileOperands& t) {
  if (!g.tile_page_pairs || !t.bf16_input() || t.k_steps % 2 != 0) return false;
  const int stage_bytes = (t.wide() ? 2 : 1) * TILE_STAGING_BYTES;
  return min(TILE_X_STAGES, sm.x_floats * 4 / stage_bytes) >= 4;
}

// The consumers' side of a tile: every page's products into acc (this thread's share, TileLanes). Each page waits
// for its input stage and weight page, then one barrier (everyone's products of the previous page done: its page and
// stage are freed and refilled); O's fp32 input is converted into a bf16 copy while the previous page's products
// run (no wgmma group stays open across the loop's back edge: that makes ptxas serialise every product, C7515).
// A failed wait does not leave the loop: the remaining pages skip their waits and multiply stale shared memory, and
// the tile returns false after it; a return from inside the loop put the products on a path ptxas takes as divergent
// and serialised every wgmma (C7520; measured, H200, 1B: 2.613 against 3.027 ms per batch-32 step without it).
// Frees the pages as matvecs do (consumer_matvec.cuh) and moves the ring cursor. False: a wait failed (recorded).
// WIDE: t.wide() (one loop per form: the products' shapes are the instructions'). PAIRS: tile_takes_pairs (pages
// taken two at a time: one wait per page, one barrier and one group of eight products per pair).
template <bool WIDE, bool PAIRS>
__device__ __forceinline__ bool tile_products(const Globals& g, const Shared& sm, const int* w, const TileOperands& t,
                                              const TileLanes& tl, float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
  const int tid = threadIdx.x, tok_pad = (t.tokens + 15) & ~15;
  const bool direct = WIDE || t.bf16_input();  // a wide tile's input is bf16 (engine/cuda/limits.py keeps O narrow)
  const TileShared ts(sm, tok_pad, direct, WIDE);
  const int NP = t.k_steps, keep_from = NP - min(g.defer_free_pages, NP);  // later pages: freed after the release
  const int tt = tid % TILE_TOKENS, q = tid / TILE_TOKENS;  // O's conversion: token tt, columns 16q .. 16q + 15
  const bool converts = !direct && tt < tok_pad;
  if (tid == 0) {
    for (int s = 0; s < ts.n_stages; ++s) tk::init_semaphore(ts.bars[s], 1);
    tk::fence_semaphore_init();
    // The activations were written this step by other SMs' generic stores (ordered before this thread's acquire of
    // the dependency counters); the copies below read them through the async proxy.
    asm volatile("fence.proxy.async.global;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // shared x was last written by generic stores
    for (int s = 0; s < ts.n_stages && s < NP; ++s) issue_tile_x(g, ts, t, tok_pad, s, s);
    // The input streams with the pages (no separate read to shield): the loader back to its streaming cap.
    timing_mark(g, w, MARK_INPUT);
    set_low_cap_from(sm, NO_LOW_CAP);
  }
  // Zeroed here rather than by the first product's scale-d: accumulators a wgmma reads undefined make ptxas treat the
  // pipeline as open at this function's call and spill around it (C7510).
#pragma unroll
  for (int j = 0; j < TILE_N_BLOCKS<WIDE>; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  const uint32_t R = sm.ring_pages, pos0 = sm.ring_cursor[0];
  uint32_t ring = sm.ring_cursor[1], round = sm.ring_cursor[2], prev_ring = 0;
  const uint32_t b_rows = tl.row0 * 128;  // this warpgroup's rows of a page (wide: all, from row 0)
  const uint32_t a_toks = WIDE ? tl.wg * TILE_STAGING_BYTES : 0;  // this warpgroup's tokens of a stage
  bool ok = true;
  // The input's stages are waited in page order: the next one's index and parity are counters, not p % n_stages and
  // p / n_stages (two divisions by a run-time value per page: 14 % of the page loop's warp samples, ncu, batch 64).
  int wait_s = 0;
  uint32_t wait_parity = 0;
  const auto wait_stage = [&](int p) -> int {
    const int s = wait_s;
    if (ok) ok = wait_pipeline(g, ts.bars[s], wait_parity, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
    if (++wait_s == ts.n_stages) {
      wait_s = 0;
      wait_parity ^= 1;
    }
    return s;
  };
  // O: K step p's x into copy p % 2 (last read by page p - 2's products); returns the stage it came from.
  const auto convert_step = [&](int p) -> int {
    const int s = wait_stage(p);
    if (ok && converts)
      convert_tile_x(ts.stages + s * ts.stage_bytes, ts.staging + (p & 1) * TILE_STAGING_BYTES, tok_pad, tt, q);
    return s;
  };
  consumer_sync();  // the stage barriers' initialisation before anyone waits on them
  // stage: a bf16 input's stage of page p (prev_stage: page p - 1's); O's, the stage page p was converted from
  int stage = 0, prev_stage = 0;
  uint32_t pair_ring0 = 0;
  if constexpr (PAIRS) {
    // A bf16 input, NP even, four or more stages (tile_takes_pairs). Pages p and p + 1 with their stages; past the
    // barrier the previous pair's products are done, so thread 0 frees its two pages and refills its two stages.
    int stage1 = 0, prev_stage1 = 0;
    uint32_t prev_ring1 = 0;
    for (int p = 0; p < NP; p += 2) {
      prev_stage = stage;
      prev_stage1 = stage1;
      stage = wait_stage(p);
      stage1 = wait_stage(p + 1);
      const uint32_t ring1 = ring + 1 == R ? 0 : ring + 1, round1 = ring + 1 == R ? round + 1 : round;
      if (ok) ok = wait_page_issued(g, sm, pos0 + p + 1, w);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring1], round1 & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p + 1);
      ok = consumer_all(ok);
      if (tid == 0 && ok) {
        if (p == 0) timing_mark(g, w, MARK_FIRST_PAGE);
        if (p + 2 == NP) timing_mark(g, w, MARK_LAST_PAGE);
        if (p >= 2) {
          if (p - 2 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
          if (p - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring1]);
          if (p - 2 + ts.n_stages < NP) issue_tile_x(g, ts, t, tok_pad, p - 2 + ts.n_stages, prev_stage);
          if (p - 1 + ts.n_stages < NP) issue_tile_x(g, ts, t, tok_pad, p - 1 + ts.n_stages, prev_stage1);
        }
      }
      tile_pair_products<WIDE>(ts.stages + stage * ts.stage_bytes + a_toks, tk::smem_addr(sm.page(ring)) + b_rows,
                               ts.stages + stage1 * ts.stage_bytes + a_toks, tk::smem_addr(sm.page(ring1)) + b_rows,
                               acc);
      tk::wgmma_wait<0>();
      prev_ring = ring;
      prev_ring1 = ring1;
      ring = ring1 + 1 == R ? 0 : ring1 + 1;
      round = ring1 + 1 == R ? round1 + 1 : round1;
    }
    pair_ring0 = prev_ring;  // the last pair's first page: freed below, after everyone's products
    prev_ring = prev_ring1;
  } else {
    if (!direct && NP > 0) stage = convert_step(0);
    for (int p = 0; p < NP; ++p) {
      if (direct) {
        prev_stage = stage;
        stage = wait_stage(p);
      }
      if (ok) ok = wait_page_issued(g, sm, pos0 + p, w);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
      // Past this barrier: page p - 1's products are done (its page and input stage free), page p's input is ready (or
      // some thread's wait failed: ok is false for all of them from here on).
      ok = consumer_all(ok);
      if (tid == 0 && ok) {
        if (p == 0) timing_mark(g, w, MARK_FIRST_PAGE);
        if (p == NP - 1) timing_mark(g, w, MARK_LAST_PAGE);
        if (p >= 1 && p - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
        // The stage refilled: a bf16 input's stage of page p - 1 (read by its products), O's of page p (converted).
        const int next = direct ? p - 1 + ts.n_stages : p + ts.n_stages;
        if ((!direct || p >= 1) && next < NP) issue_tile_x(g, ts, t, tok_pad, next, direct ? prev_stage : stage);
      }
      const uint32_t a_addr =
          direct ? ts.stages + stage * ts.stage_bytes + a_toks : ts.staging + (p & 1) * TILE_STAGING_BYTES;
      tile_step_products<WIDE>(a_addr, tk::smem_addr(sm.page(ring)) + b_rows, acc);
      if (!direct && p + 1 < NP) stage = convert_step(p + 1);
      tk::wgmma_wait<0>();
      prev_ring = ring;
      if (++ring == R) {
        ring = 0;
        ++round;
      }
    }
  }
  const bool all_ok = consumer_all(ok);  // every product done (x may be reused)
  if (tid == 0) {
    if (PAIRS && NP >= 2 && NP - 2 < keep_from) tk::arrive(sm.page_empty[pair_ring0]);
    if (NP - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
    for (int s = 0; s < ts.n_stages; ++s) tk::inval_semaphore(ts.bars[s]);  // scratch is plain memory again
    sm.ring_cursor[0] = pos0 + NP;
    sm.ring_cursor[1] = ring;
    sm.ring_cursor[2] = round;
    timing_mark(g, w, MARK_COMPUTED);
  }
  return all_ok;
}

}  // namespace mk::vm
