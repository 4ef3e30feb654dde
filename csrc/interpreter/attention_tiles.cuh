// attention_tiles.cuh: many-query attention on the tensor cores (a prompt chunk's queries against its sequence's
// keys, flash-attention style): the ATTN_PARTIAL core where a task has at least TILE_MIN_ROWS (token, head) rows.
//
// Why: the CUDA-core path (attention_global.cuh) walks a task's queries one after another and reads every key of
// the split again from L2 for each of them, at a few dot products per load: a 16k-token chunk over a 30k context
// took seconds per layer. Here the task's rows (every (token, head) of its queries, heads of one KV group side by
// side) are cut into blocks of 16, one per consumer warp (rounds of 128 rows), staged in shared memory as bf16;
// each tile of TILE_KEYS keys and values is copied into shared memory once (cp.async, up to tile_kv_buffers - 1
// tiles ahead) and read by all 8 warps, whose scores S = Q K^T and outputs O += P V are m16n8k16 products in fp32 with
// bf16 operands. Online softmax in base 2 (the queries carry
// scale * log2 e), rows' state m and l per lane, l summed over the quad at the end (flash-attention 2).
//
// Fragments (PTX ISA, mma.m16n8k16): lane l, g = l / 4, q = l % 4. A (Q, P): a0 (row g, k 2q..2q+1), a1 (row g + 8),
// a2 (row g, k 2q + 8..), a3 (row g + 8, k 2q + 8..). B: b0 (k 2q..2q+1, column g), b1 (k 2q + 8..). C: c0, c1 (row g,
// columns 2q, 2q + 1), c2, c3 (row g + 8). K rows run along k (dims): plain ldmatrix gives S's B; V rows run along
// n (dims) with k the keys: ldmatrix .trans gives O's B. Two S column tiles (16 keys) are P's A for one k-step.
// Shared rows are TILE_SKEW elements longer than the head so ldmatrix's 8 rows fall in different banks.
#pragma once

#include "code_size.cuh"

#include "../tk/cp_async.cuh"
#include "../tk/mma.cuh"
#include "../tk/shared_vec.cuh"
#include "attention_global.cuh"

namespace mk::vm {

inline constexpr int TILE_ROWS = 16;                                    // (token, head) rows per warp and round
inline constexpr int TILE_ROUND_ROWS = TILE_ROWS * NUM_CONSUMER_WARPS;  // rows of one pass over the keys
inline constexpr int TILE_KEYS = 32;                                    // keys per shared K / V tile
inline constexpr int TILE_SKEW = 8;                                     // bf16 elements past each shared row
// Fewer rows keep the CUDA-core path: one warp would do the tile work while seven wait.
inline constexpr int TILE_MIN_ROWS = 16;
// K / V tiles in flight: a tile's products take ~0.3 us on an SM, its copy from L2 several times that, so a tile
// copied one ahead (two buffers) leaves the warps waiting for most of each tile (1B, H200: a 2 048-token chunk's
// attention at ~0.5 TFLOP/s per SM, 2 us per 32-key tile). Heads of up to 64 dims have room in x for four buffers at
// the smallest ring (three tiles ahead; Globals::attn_kv_buffers, KernelOptions.attn_kv_buffers, may keep them at
// two); 128-dim heads for two. The shared plan and the host's x room are for the most.
inline constexpr int TILE_KV_BUFFERS_SMALL_HEAD = 4;  // head dims up to 64: at most
inline constexpr int TILE_KV_BUFFERS_LARGE_HEAD = 2;  // wider heads

__host__ __device__ constexpr int tile_pitch(int hd) { return hd + TILE_SKEW; }  // bf16 elements per shared row
__host__ __device__ constexpr int tile_kv_buffers(int hd) {
  return hd <= 64 ? TILE_KV_BUFFERS_SMALL_HEAD : TILE_KV_BUFFERS_LARGE_HEAD;
}
// Shared rows of the tile path: a round's queries (read as A fragments at every tile: holding a 128-wide head's in
// registers spilled the kernel's), then `buffers` buffers of TILE_KEYS keys and values (default: the most at hd).
__host__ __device__ constexpr int tile_scratch_rows(int hd, int buffers = 0) {
  return TILE_ROUND_ROWS + (buffers ? buffers : tile_kv_buffers(hd)) * 2 * TILE_KEYS;
}
__host__ __device__ constexpr int tile_scratch_bytes(int hd, int buffers = 0) {
  return tile_scratch_rows(hd, buffers) * tile_pitch(hd) * 2;
}
static_assert(tile_scratch_bytes(64) <= X_FLOATS * 4 && tile_scratch_bytes(128) <= X_FLOATS * 4,
              "the tile path's scratch fits x at the smallest ring");
static_assert((TILE_KV_BUFFERS_SMALL_HEAD & (TILE_KV_BUFFERS_SMALL_HEAD - 1)) == 0 &&
              (TILE_KV_BUFFERS_LARGE_HEAD & (TILE_KV_BUFFERS_LARGE_HEAD - 1)) == 0 && TILE_KV_BUFFERS_LARGE_HEAD >= 2,
              "a power of two of buffers (the buffer index is a mask), two or more");

__device__ __forceinline__ void store_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// K / V buffers this launch's tile path uses at head dim hd (a power of two: 2 or 4).
__device__ __forceinline__ int launch_kv_buffers(const Globals& g, int hd) {
  return hd <= 64 && g.attn_kv_buffers == TILE_KV_BUFFERS_SMALL_HEAD ? TILE_KV_BUFFERS_SMALL_HEAD
                                                                      : TILE_KV_BUFFERS_LARGE_HEAD;
}

// Whether `task` takes the tile path: the kernel option on, enough rows, and x large enough at this ring.
__device__ __forceinline__ bool takes_tiles(const Globals& g, const Shared& sm, const AttnTask& task, int hd) {
  if (!g.attn_tiles || sm.x_floats * 4 < tile_scratch_bytes(hd, launch_kv_buffers(g, hd))) return false;
  const StepArgs sa(g);
  const int nq = sa.live_end(task.seq) - sa.query_start(task.seq);
  const int part = nq * (task.q_part + 1) / task.q_parts - nq * task.q_part / task.q_parts;
  return part * (task.h_end - task.h_begin) >= TILE_MIN_ROWS;
}

// Keys [j0, j0 + TILE_KEYS) of the task's KV group into buffer `buf` (K rows, then V rows); keys at or past `end`
// are zeros (their scores are masked, and a zero value times a zero weight adds nothing).
template <int HD>
__device__ __forceinline__ void copy_kv_tile(const Globals& g, const StepArgs& sa, int s, int layer, int grp, int j0,
                                             int end, uint32_t buf) {
  constexpr int CHUNKS = HD / 8, PITCH_B = tile_pitch(HD) * 2;
  const int ps = sa.page_size();
  MK_ROLLED
  for (int i = threadIdx.x; i < 2 * TILE_KEYS * CHUNKS; i += CONSUMER_THREADS) {
    const int which = i / (TILE_KEYS * CHUNKS), kk = (i / CHUNKS) % TILE_KEYS, c = i % CHUNKS;
    const int j = j0 + kk;
    const bool valid = j < end;
    const bf16* cache = which ? g.v_cache : g.k_cache;
    const bf16* src = cache;
    if (valid) {
      const int page = sa.block(s, j / ps);
      src = cache + ((((long long)layer * g.kv_num_pages + page) * g.n_kv + grp) * ps + j % ps) * HD + c * 8;
    }
    tk::cp_async_16_or_zero(buf + (uint32_t)((which * TILE_KEYS + kk) * PITCH_B + c * 16), src, valid);
  }
}

// Causal attention of `task` on the tensor cores; `emit(t, h, d, out, lse)` as attend (attention_global.cuh), from
// each warp straight after its keys (no merge: every row is one warp's).
template <int DPL, typename Emit>
__device__ void attend_tiles(const Globals& g, const Shared& sm, const int* w, const AttnTask& task, Emit emit) {
  constexpr int HD = 32 * DPL, KSTEPS = HD / 16, DIM_TILES = HD / 8, PITCH = tile_pitch(HD);
  static_assert(HD % 16 == 0 && TILE_KEYS % 16 == 0, "whole k-steps of dims and keys");
  const StepArgs sa(g);
  const int layer = w[W_LAYER], s = task.seq, grp = task.grp, split = task.split, nsplit = task.nsplit;
  const int qcols = g.n_heads * HD, ps = sa.page_size();
  const int head0 = grp * (g.n_heads / g.n_kv) + task.h_begin, NH = task.h_end - task.h_begin;
  const int C = sa.context_len(s), seq_first = sa.query_start(s), nq = sa.live_end(s) - seq_first;
  const int q_first = seq_first + nq * task.q_part / task.q_parts;
  const int q_last = seq_first + nq * (task.q_part + 1) / task.q_parts;
  const int P = (C + ps - 1) / ps;
  const int key_begin = (split * P / nsplit) * ps, key_end = min(((split + 1) * P / nsplit) * ps, C);
  const int rows = (q_last - q_first) * NH;
  const float qscale = attn_scale(g) * 1.4426950408889634f;  // log2(e): scores in base 2
  const int warp = tk::warp_id(), lane = tk::lane_id(), gq = lane >> 2, q4 = lane & 3, mat = lane >> 3;
  const uint32_t base = tk::smem_addr(sm.x);
  for (int r0 = 0; r0 < rows; r0 += TILE_ROUND_ROWS) {
    const int round_rows = min(TILE_ROUND_ROWS, rows - r0);
    // The round's queries, scaled, as bf16 rows (zeros past the last row).
    MK_ROLLED
    for (int i = threadIdx.x; i < TILE_ROUND_ROWS * (HD / 2); i += CONSUMER_THREADS) {
      const int r = i / (HD / 2), d = (i % (HD / 2)) * 2;
      float2 v = make_float2(0.f, 0.f);
      if (r < round_rows) {
        const int row = r0 + r, t = q_first + row / NH, h = row % NH;
        v = __ldcg(reinterpret_cast<const float2*>(g.q + (long long)t * qcols + (head0 + h) * HD + d));
      }
      store_shared_u32(base + (uint32_t)((r * PITCH + d) * 2), pack_bf16x2(v.x * qscale, v.y * qscale));
    }
    // This lane's two rows (gq, gq + 8 of the warp's block): keys [key_begin, end) are visible to them.
    const int row_a = r0 + warp * TILE_ROWS + gq, row_b = row_a + 8;
    const int end_a = row_a < rows ? min(key_end, sa.position(q_first + row_a / NH) + 1) : key_begin;
    const int end_b = row_b < rows ? min(key_end, sa.position(q_first + row_b / NH) + 1) : key_begin;
    int warp_end = max(end_a, end_b);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) warp_end = max(warp_end, __shfl_xor_sync(tk::FULL_MASK, warp_end, off));
    // The round's last row has its latest token: no row sees a key past it.
    const int round_end = min(key_end, sa.position(q_first + (r0 + round_rows - 1) / NH) + 1);
    consumer_sync();
    if (threadIdx.x == 0 && r0 == 0) timing_mark(g, w, MARK_INPUT);
    // This lane's ldmatrix row of the warp's query block (A: rows 0-7, 8-15 x dims 0-7, 8-15 of a k-step).
    const uint32_t q_lane = base + (uint32_t)(((warp * TILE_ROWS + (lane & 7) + 8 * (mat & 1)) * PITCH + 8 * (mat >> 1)) * 2);
    float o[DIM_TILES][4];
#pragma unroll
    for (int n = 0; n < DIM_TILES; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;
    const int tiles = round_end > key_begin ? (round_end - key_begin + TILE_KEYS - 1) / TILE_KEYS : 0;
    const int NBUF = launch_kv_buffers(g, HD);
    constexpr uint32_t BUF_BYTES = 2 * TILE_KEYS * PITCH * 2;
    const uint32_t kv = base + TILE_ROUND_ROWS * PITCH * 2;  // the K / V buffers, after the queries
    // Tiles 0 .. NBUF - 2 in flight first, one commit group each (empty past the last tile: the count stays exact).
    MK_ROLLED
    for (int b = 0; b < NBUF - 1; ++b) {
      if (b < tiles) copy_kv_tile<HD>(g, sa, s, layer, grp, key_begin + b * TILE_KEYS, round_end, kv + b * BUF_BYTES);
      tk::cp_async_commit();
    }
    MK_ROLLED
    for (int it = 0; it < tiles; ++it) {
      const int j0 = key_begin + it * TILE_KEYS;
      // NBUF - 1 + it groups committed, tile it's is group it: at most NBUF - 2 newer ones may be in flight.
      if (NBUF == TILE_KV_BUFFERS_SMALL_HEAD) {
        tk::cp_async_wait<TILE_KV_BUFFERS_SMALL_HEAD - 2>();
      } else {
        tk::cp_async_wait<TILE_KV_BUFFERS_LARGE_HEAD - 2>();
      }
      // Past this barrier every thread's copies of tile it landed and every warp is done with tile it - 1, whose
      // buffer takes tile it + NBUF - 1 (one barrier per tile).
      consumer_sync();
      if (it + NBUF - 1 < tiles)
        copy_kv_tile<HD>(g, sa, s, layer, grp, j0 + (NBUF - 1) * TILE_KEYS, round_end,
                         kv + ((it + NBUF - 1) & (NBUF - 1)) * BUF_BYTES);
      tk::cp_async_commit();
      const uint32_t k_tile = kv + (it & (NBUF - 1)) * BUF_BYTES, v_tile = k_tile + TILE_KEYS * PITCH * 2;
      if (j0 < warp_end) {  // uniform over the warp: its rows see some key of this tile
        float sc[TILE_KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < TILE_KEYS / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
          uint32_t qa[4];
          tk::ldmatrix_x4_shared(qa, q_lane + ks * 32);
#pragma unroll
          for (int np = 0; np < TILE_KEYS / 16; ++np) {
            uint32_t b[4];  // keys 16 np + (0..7, 8..15) x dims 16 ks + (0..7, 8..15)
            tk::ldmatrix_x4_shared(b, k_tile + (uint32_t)(((16 * np + (lane & 7) + 8 * (mat >> 1)) * PITCH +
                                                           ks * 16 + 8 * (mat & 1)) * 2));
            tk::detail::mma_16x8x16_acc(sc[2 * np], qa, b[0], b[1]);
            tk::detail::mma_16x8x16_acc(sc[2 * np + 1], qa, b[2], b[3]);
          }
        }
        // Mask, then the rows' new maxima (over the quad holding each row).
        float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
        for (int n = 0; n < TILE_KEYS / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = j0 + 8 * n + 2 * q4 + (e & 1);
            if (j >= (e < 2 ? end_a : end_b)) sc[n][e] = -INFINITY;
          }
          mx_a = fmaxf(mx_a, fmaxf(sc[n][0], sc[n][1]));
          mx_b = fmaxf(mx_b, fmaxf(sc[n][2], sc[n][3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
          mx_a = fmaxf(mx_a, __shfl_xor_sync(tk::FULL_MASK, mx_a, off));
          mx_b = fmaxf(mx_b, __shfl_xor_sync(tk::FULL_MASK, mx_b, off));
        }
        const float new_a = fmaxf(m_a, mx_a), new_b = fmaxf(m_b, mx_b);
        // A row that has seen no key yet keeps m = -inf, its weights 0 (no -inf - -inf).
        const float keep_a = new_a == -INFINITY ? 1.f : exp2f(m_a - new_a);
        const float keep_b = new_b == -INFINITY ? 1.f : exp2f(m_b - new_b);
        const float sub_a = new_a == -INFINITY ? 0.f : new_a, sub_b = new_b == -INFINITY ? 0.f : new_b;
        m_a = new_a;
        m_b = new_b;
        float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
        for (int n = 0; n < TILE_KEYS / 8; ++n) {
          sc[n][0] = exp2f(sc[n][0] - sub_a);
          sc[n][1] = exp2f(sc[n][1] - sub_a);
          sc[n][2] = exp2f(sc[n][2] - sub_b);
          sc[n][3] = exp2f(sc[n][3] - sub_b);
          sum_a += sc[n][0] + sc[n][1];
          sum_b += sc[n][2] + sc[n][3];
        }
        l_a = l_a * keep_a + sum_a;
        l_b = l_b * keep_b + sum_b;
#pragma unroll
        for (int n = 0; n < DIM_TILES; ++n) {
          o[n][0] *= keep_a;
          o[n][1] *= keep_a;
          o[n][2] *= keep_b;
          o[n][3] *= keep_b;
        }
        // O += P V: keys 16 m .. 16 m + 15 of the tile are one k-step, P's A from S's column tiles 2 m, 2 m + 1.
#pragma unroll
        for (int m = 0; m < TILE_KEYS / 16; ++m) {
          const uint32_t pa[4] = {pack_bf16x2(sc[2 * m][0], sc[2 * m][1]), pack_bf16x2(sc[2 * m][2], sc[2 * m][3]),
                                  pack_bf16x2(sc[2 * m + 1][0], sc[2 * m + 1][1]),
                                  pack_bf16x2(sc[2 * m + 1][2], sc[2 * m + 1][3])};
#pragma unroll
          for (int dp = 0; dp < HD / 16; ++dp) {
            uint32_t b[4];  // keys 16 m + (0..7, 8..15) x dims 16 dp + (0..7, 8..15), transposed
            tk::ldmatrix_x4_trans_shared(b, v_tile + (uint32_t)(((16 * m + (lane & 7) + 8 * (mat & 1)) * PITCH +
                                                                 16 * dp + 8 * (mat >> 1)) * 2));
            tk::detail::mma_16x8x16_acc(o[2 * dp], pa, b[0], b[1]);
            tk::detail::mma_16x8x16_acc(o[2 * dp + 1], pa, b[2], b[3]);
          }
        }
      }
    }
    // Every warp is done with the round's queries and K / V buffers before the next round (or the caller) reuses them.
    consumer_sync();
    if (threadIdx.x == 0 && r0 == 0) timing_mark(g, w, MARK_COMPUTED);
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      l_a += __shfl_xor_sync(tk::FULL_MASK, l_a, off);
      l_b += __shfl_xor_sync(tk::FULL_MASK, l_b, off);
    }
    // Outputs: o / l and lse = ln(sum of exp(scores)) = (m + log2 l) ln 2; a row that saw no key: 0 and -inf.
    const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
    const float lse_a = l_a > 0.f ? (m_a + log2f(l_a)) * 0.6931471805599453f : -INFINITY;
    const float lse_b = l_b > 0.f ? (m_b + log2f(l_b)) * 0.6931471805599453f : -INFINITY;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = half ? row_b : row_a;
      if (row >= rows) continue;
      const int t = q_first + row / NH, h = row % NH;
      const float inv = half ? inv_b : inv_a, lse = half ? lse_b : lse_a;
#pragma unroll
      for (int n = 0; n < DIM_TILES; ++n) {
        emit(t, h, 8 * n + 2 * q4, o[n][2 * half] * inv, lse);
        emit(t, h, 8 * n + 2 * q4 + 1, o[n][2 * half + 1] * inv, lse);
      }
    }
  }
}

}  // namespace mk::vm
