// tile_matmul.cuh: TILE_MATMUL's streams and products (engine/instructions/ops/tile_matmul.py): one tile of up to
// TILE_WEIGHT_ROWS weight rows x TILE_TOKENS tokens, its K columns in TILE_K-wide steps, on the tensor cores.
//
// Why: the matvec opcodes take a step's tokens a group of 16 at a time over the same pages, so a step of 64
// sequences re-runs every page's products, input loads and epilogues four times (1B, H200: batch 64 at 13x the
// batch-1 step). A tile reads each weight once per token chunk and multiplies it with all the chunk's tokens at once.
//
// Ring page p of a tile is K step p of its rows: TILE_WEIGHT_ROWS / 32 boxes of 32 rows x TILE_K bf16 (128-byte rows,
// 128-byte swizzle: 16-byte chunk c of row r at chunk c ^ (r % 8)), copied by the loader from the matrix's tensor
// map (Globals::tile_maps) like any weight page, ahead of the instruction. The activations' K step (fp32, written
// by other SMs this step) is copied by consumer thread 0 once the dependencies are met, up to TILE_X_STAGES steps
// ahead, into x stages in shared x (two boxes of 32 columns per 16 tokens, 128-byte swizzled). Every page, the
// consumers convert the step's x to bf16 (times the norm's weight for the normalised inputs, summing squares for the
// norm's scale, applied to the products at the end as the matvec ops do: activations.cuh rms_inv), and each warp
// multiplies a 16-row block of the page with its token blocks (mma m16n8k16, ldmatrix from both swizzled tiles).
#pragma once

#include "code_size.cuh"

#include "../tk/mma.cuh"
#include "../tk/shared_vec.cuh"
#include "../tk/tensor_map.cuh"
#include "marks.cuh"
#include "state.cuh"

namespace mk::vm {

inline constexpr int TILE_WEIGHT_ROWS = 128;      // weight rows of one tile (step_builder_tiles.py TILE_MAX_ROWS)
inline constexpr int TILE_K = 64;          // K columns per ring page (step_builder_tiles.py TILE_K_STEP)
inline constexpr int TILE_TOKENS = 64;     // tokens of one tile (step_builder_tiles.py TILE_MAX_TOKENS)
inline constexpr int TILE_W_BOX_ROWS = 32;  // the weight maps' boxes: 32 rows x TILE_K bf16
inline constexpr int TILE_X_BOX_ROWS = 16;  // the activation maps' boxes: 16 tokens x TILE_X_BOX_COLS fp32
inline constexpr int TILE_X_BOX_COLS = 32;
inline constexpr int TILE_X_STAGES = 4;    // most K steps of x in flight
static_assert(TILE_WEIGHT_ROWS / TILE_W_BOX_ROWS * TILE_W_BOX_ROWS * TILE_K * 2 == PAGE_BYTES, "a page is one K step");
static_assert(TILE_K * 2 == 128 && TILE_X_BOX_COLS * 4 == 128, "boxes of 128-byte rows (the 128-byte swizzle)");
static_assert(TILE_K == 2 * TILE_X_BOX_COLS, "two x boxes per K step");
static_assert(TILE_K == 4 * 16 && TILE_TOKENS * 4 == CONSUMER_THREADS, "a thread converts 16 columns of one token");
static_assert(TILE_X_STAGES * 8 <= SCRATCH_FLOATS * 4 - 64, "the x stages' barriers sit in scratch");
static_assert(TILE_WEIGHT_ROWS == 16 * NUM_CONSUMER_WARPS && TILE_TOKENS == 64, "a warp per 16 rows, 4 token blocks each");

// The kinds (TileKind) and the maps of Globals::tile_maps (encode_tile_maps, interpreter.cu): the kind's weight map
// is tile_maps[kind], its input's TILE_MAP_X + the input (hidden, attention output, act). LM_HEAD's instructions have
// layer -1 (its matrix is not per layer).
enum TileKindCode : int { TILE_QKV = 0, TILE_O = 1, TILE_GATE_UP = 2, TILE_DOWN = 3, TILE_LM_HEAD = 4 };
enum TileMapIndex : int { TILE_MAP_X = 5, TILE_MAP_X_HIDDEN = 5, TILE_MAP_X_ATTN_OUT = 6, TILE_MAP_X_ACT = 7,
                          NUM_TILE_MAPS = 8 };

struct TileOperands {
  int kind, row_begin, rows, k_begin, k_steps, tok_begin, tokens;
  __device__ __forceinline__ explicit TileOperands(const int* w)
      : kind(w[W_OPERANDS]), row_begin(w[W_OPERANDS + 1]), rows(w[W_OPERANDS + 2] - w[W_OPERANDS + 1]),
        k_begin(w[W_OPERANDS + 3]), k_steps((w[W_OPERANDS + 4] - w[W_OPERANDS + 3]) / TILE_K),
        tok_begin(w[W_OPERANDS + 5]), tokens(w[W_OPERANDS + 6] - w[W_OPERANDS + 5]) {}
  __device__ __forceinline__ int x_map() const {
    return TILE_MAP_X + (kind == TILE_O ? 1 : kind == TILE_DOWN ? 2 : 0);
  }
  __device__ __forceinline__ bool normalised() const { return kind != TILE_O && kind != TILE_DOWN; }
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

// Shared x during a tile: the x stages, then two bf16 copies of a K step (the page's A operand, alternating; 128 bytes
// per token, 16-byte chunk c of token t at chunk c ^ (t % 8), so ldmatrix's 8 rows hit 8 bank groups).
struct TileShared {
  uint8_t* x;                // the stages (generic address, for the copies)
  uint32_t stages, staging;  // shared-window addresses
  int stage_bytes, staging_bytes, n_stages;
  tk::semaphore* bars;  // one per stage, in scratch
  __device__ __forceinline__ TileShared(const Shared& sm, int tok_pad) {
    stage_bytes = 2 * tok_pad * 128;
    staging_bytes = tok_pad * 128;
    const int room = sm.x_floats * 4 - 2 * staging_bytes;
    n_stages = max(1, min(TILE_X_STAGES, room / stage_bytes));
    x = reinterpret_cast<uint8_t*>(sm.x);
    stages = tk::smem_addr(sm.x);
    staging = stages + n_stages * stage_bytes;
    bars = reinterpret_cast<tk::semaphore*>(sm.scratch);
  }
};

// Consumer thread 0: copy K step `step` of the tile's tokens into stage `s`.
__device__ __forceinline__ void issue_tile_x(const Globals& g, const TileShared& ts, const TileOperands& t, int tok_pad,
                                             int step, int s) {
  tk::semaphore& bar = ts.bars[s];
  tk::arrive_expect_tx(bar, ts.stage_bytes);
  const CUtensorMap* map = g.tile_maps + t.x_map();
  uint8_t* base = ts.x + s * ts.stage_bytes;
  MK_ROLLED
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < tok_pad; r += TILE_X_BOX_ROWS)
      tk::tensor_load_2d(base + h * tok_pad * 128 + r * 128, map, t.tok_begin + r,
                         t.k_begin + step * TILE_K + h * TILE_X_BOX_COLS, bar);
}

// 16 fp32 of row `tt` (columns 16q .. 16q + 15 of the stage's K step) times the norm's weights -> bf16 in the staging
// copy; squares summed into ss (before the weights: the norm's scale is of the raw row).
__device__ __forceinline__ void convert_tile_x(uint32_t stage, uint32_t staging, int tok_pad, int tt, int q,
                                               const uint4 (&wn)[2], bool normalised, float& ss) {
  const int h = q >> 1, cb = (q & 1) * 4;
  const uint32_t row = stage + h * tok_pad * 128 + tt * 128;
  uint32_t packed[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float4 v = tk::load_shared_f4(row + (((cb + j) ^ (tt & 7)) << 4));
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    float2 w01 = make_float2(1.f, 1.f), w23 = w01;
    if (normalised) {
      const uint32_t* wv = reinterpret_cast<const uint32_t*>(&wn[j >> 1]) + 2 * (j & 1);
      w01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wv[0]));
      w23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wv[1]));
    }
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x * w01.x, v.y * w01.y);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z * w23.x, v.w * w23.y);
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
}

// One warp: acc[m][n] += its token blocks m (tokens 16(m0 + m*mstep) ..) x its two 8-row blocks n of the page.
__device__ __forceinline__ void tile_page_products(uint32_t page, uint32_t staging, int row0, int m0, int mstep, int mt,
                                                   float (&acc)[4][2][4]) {
  const int lane = tk::lane_id(), mat = lane >> 3, r8 = lane & 7;
  const int wrow = row0 + (mat >> 1) * 8 + r8;  // this lane's ldmatrix row of the weights
#pragma unroll
  for (int kk = 0; kk < TILE_K / 16; ++kk) {
    uint32_t b[4];
    tk::ldmatrix_x4_shared(b, page + wrow * 128 + (((2 * kk + (mat & 1)) ^ (wrow & 7)) << 4));
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int mb = m0 + m * mstep;
      if (mb >= mt) break;
      const int tok = mb * 16 + (mat & 1) * 8 + r8;
      uint32_t a[4];
      tk::ldmatrix_x4_shared(a, staging + tok * 128 + (((2 * kk + (mat >> 1)) ^ (tok & 7)) << 4));
      tk::detail::mma_16x8x16_acc(acc[m][0], a, b[0], b[1]);
      tk::detail::mma_16x8x16_acc(acc[m][1], a, b[2], b[3]);
    }
  }
}

// The consumers' side of a tile: every page's products into acc (this warp's 16-row block; acc[m][n][e] is token
// 16(m0 + m*mstep) + lane/4 (+8 for e >= 2), row row0 + 8n + 2(lane%4) (+1 for odd e)), the squares of each token's
// inputs summed into sm.out[q * TILE_TOKENS + token] (q: the quarter of each K step a thread converts). Frees the
// pages as matvecs do (consumer_matvec.cuh) and moves the ring cursor. False: a wait failed (recorded).
__device__ __forceinline__ bool tile_products(const Globals& g, const Shared& sm, const int* w, const TileOperands& t,
                                              float (&acc)[4][2][4], int& row0, int& m0, int& mstep) {
  const int warp = tk::warp_id(), tid = threadIdx.x, tok_pad = (t.tokens + 15) & ~15, mt = tok_pad / 16;
  const int nrg = t.rows / 16, per_rg = NUM_CONSUMER_WARPS / nrg;
  const bool active = warp < nrg * per_rg;
  row0 = (warp % nrg) * 16;
  m0 = active ? warp / nrg : mt;
  mstep = per_rg;
  const TileShared ts(sm, tok_pad);
  const int NP = t.k_steps, defer = min(g.defer_free_pages, NP);
  const int tt = tid % TILE_TOKENS, q = tid / TILE_TOKENS;  // conversion: token tt, columns 16q .. 16q + 15
  const bool converts = tt < tok_pad;
  const bf16* norm = t.kind == TILE_LM_HEAD ? g.final_norm
                     : (t.kind == TILE_QKV ? g.attn_norm : g.mlp_norm) + (long long)w[W_LAYER] * g.hidden_size;
  norm += t.k_begin + 16 * q;
  const bool normalised = t.normalised();
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
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
  float ss = 0.f;
  const uint32_t R = sm.ring_pages, pos0 = sm.ring_cursor[0];
  uint32_t ring = sm.ring_cursor[1], round = sm.ring_cursor[2], prev_ring = 0;
  consumer_sync();  // the stage barriers' initialisation before anyone waits on them
  bool ok = true;
  for (int p = 0; p < NP; ++p) {
    const int s = p % ts.n_stages;
    uint4 wn[2] = {};
    if (normalised && converts) {
      wn[0] = __ldg(reinterpret_cast<const uint4*>(norm + p * TILE_K));
      wn[1] = __ldg(reinterpret_cast<const uint4*>(norm + p * TILE_K) + 1);
    }
    if (ok) ok = wait_pipeline(g, ts.bars[s], (p / ts.n_stages) & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
    const uint32_t staging = ts.staging + (p & 1) * ts.staging_bytes;
    if (ok && converts) convert_tile_x(ts.stages + s * ts.stage_bytes, staging, tok_pad, tt, q, wn, normalised, ss);
    if (ok) ok = wait_page_issued(g, sm, pos0 + p, w);
    if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
    if (!consumer_all(ok)) return false;  // staging written, stage s read, every warp done with page p - 1
    if (tid == 0) {
      if (p == 0) timing_mark(g, w, MARK_FIRST_PAGE);
      if (p == NP - 1) timing_mark(g, w, MARK_LAST_PAGE);
      if (p >= 1 && p - 1 < NP - defer) tk::arrive(sm.page_empty[prev_ring]);
      if (p + ts.n_stages < NP) issue_tile_x(g, ts, t, tok_pad, p + ts.n_stages, s);
    }
    tile_page_products(tk::smem_addr(sm.page(ring)), staging, row0, m0, mstep, mt, acc);
    prev_ring = ring;
    if (++ring == R) {
      ring = 0;
      ++round;
    }
  }
  if (converts) sm.out[q * TILE_TOKENS + tt] = ss;  // each token's four quarters: summed by tile_rms_inv
  const bool all_ok = consumer_all(true);  // every warp done with the last page; the sums visible
  if (tid == 0) {
    if (NP - 1 < NP - defer) tk::arrive(sm.page_empty[prev_ring]);
    for (int s = 0; s < ts.n_stages; ++s) tk::inval_semaphore(ts.bars[s]);  // scratch is plain memory again
    sm.ring_cursor[0] = pos0 + NP;
    sm.ring_cursor[1] = ring;
    sm.ring_cursor[2] = round;
    timing_mark(g, w, MARK_COMPUTED);
  }
  return all_ok;
}

// 1 / rms of the tile's token i (its squares summed by tile_products).
__device__ __forceinline__ float tile_rms_inv(const Globals& g, const Shared& sm, int i) {
  const float total = sm.out[i] + sm.out[TILE_TOKENS + i] + sm.out[2 * TILE_TOKENS + i] + sm.out[3 * TILE_TOKENS + i];
  return 1.0f / sqrtf(total / (float)g.hidden_size + g.eps);
}

}  // namespace mk::vm
