// dot_rows_mma.cuh: the page matvec for ONE activation row (batch-1 decode) on the tensor cores.
//
// Why: on CUDA cores every bf16 weight is unpacked and multiplied on its own; one warp alone takes 1654
// cycles for a 16 KB page of 2048-wide rows, 3044 / 5524 for 4096 / 8192-wide ones, against 1127 / 1321 /
// 2111 here (H100, dev/microbench/page_matvec.cu). The op's last page, computed by one warp after its
// copy lands, sits on the critical path of every weight-streaming op (its MARK_LAST_PAGE_CYCLES in a
// profile: docs/PROFILING.md). In the kernel it buys 4 % on the 8B shape, 0.5 % on the 1B.
//
// The mapping: one mma.sync m16n8k16 covers a 128-element chunk of TWO weight rows. The chunk is cut
// into 8 segments, segment q = elements [8q, 8q + 8) and [64 + 8q, 64 + 8q + 8). A's row m = 8r + q is
// segment q of weight row r (its k 0-7, then k 8-15); B's column n is segment n of x. D[8r + q][q] is
// then row r's dot product over segment q, and row r's 8 such entries sum to its chunk's. The other 7
// columns of D are discarded: batch-1 decode has one activation column, so 1/8 of a tensor-core product
// is the most it can use. The shared loads, not the tensor pipe, bound a page (loads alone take 2/3 of its
// cycles, mma alone less than the whole: dev/microbench/page_mma_bound.cu), hence the unrolled blocks.
// Shared-memory reads are conflict-free without a swizzle: each 8x8 matrix of the ldmatrix.x4 that
// fills A is 8 consecutive 16-byte segments of one row, i.e. 128 contiguous bytes; lane l's B fragment
// is x[2l, 2l + 1] and x[64 + 2l, 64 + 2l + 1] of the chunk (shared by every row pair of the page).
//
// x is rounded to bf16 for the tensor cores (as torch's bf16 linear layers round their input) when the
// consumers write it to shared memory (activations.cuh, x_is_bf16): every page then reads half the x bytes
// and converts nothing; products accumulate in fp32.
#pragma once

#include "code_size.cuh"

#include "../tk/mma.cuh"
#include "../tk/shared_vec.cuh"
#include "../tk/util.cuh"
#include "dot_short_rows.cuh"

namespace mk::vm {

inline constexpr int MMA_CHUNK = 128;  // row elements per mma

// Rows the tensor-core path takes: longer than the short-row path's (dot_short_rows.cuh), whole chunks.
__host__ __device__ constexpr bool mma_row_ok(int K) { return K > SHORT_ROW_MAX_K && K % MMA_CHUNK == 0; }

// x's B fragment for the chunk at x_addr (bf16 in shared memory): x[2l, 2l + 1] and x[64 + 2l, 64 + 2l + 1].
__device__ __forceinline__ void load_x_fragment(uint32_t (&b)[2], uint32_t x_addr, int lane) {
  b[0] = tk::load_shared_u32(x_addr + 4 * lane);
  b[1] = tk::load_shared_u32(x_addr + 2 * 64 + 4 * lane);
}

// The shared loads of one iteration: C chunks (from element k) of PAIRS row pairs. lane_row[p] is this
// lane's ldmatrix row address for pair p (its row r = (lane / 8) % 2, its k half, its segment).
template <int PAIRS, int C>
struct MmaOperands {
  uint32_t a[PAIRS][C][4], b[C][2];

  __device__ __forceinline__ void load(const uint32_t (&lane_row)[PAIRS], uint32_t x_addr, int k, int lane) {
#pragma unroll
    for (int c = 0; c < C; ++c) load_x_fragment(b[c], x_addr + (uint32_t)(k + c * MMA_CHUNK) * 2, lane);
#pragma unroll
    for (int p = 0; p < PAIRS; ++p)
#pragma unroll
      for (int c = 0; c < C; ++c) tk::ldmatrix_x4_shared(a[p][c], lane_row[p] + (uint32_t)(k + c * MMA_CHUNK) * 2);
  }
  __device__ __forceinline__ void multiply(float (&acc)[PAIRS][C][4]) const {
#pragma unroll
    for (int p = 0; p < PAIRS; ++p)
#pragma unroll
      for (int c = 0; c < C; ++c) tk::detail::mma_16x8x16_acc(acc[p][c], a[p][c], b[c][0], b[c][1]);
  }
};

// Row elements one unrolled block of mma_loop covers. A loop over a run-time K is not unrolled, so each
// iteration's mma waited on its own shared loads: in the kernel a 16 KB page of 2048-wide rows took 1840
// SM cycles, and 1040 with K known at compile time (every load of the page issued ahead of its mma; H200).
// Blocks of a fixed size get the same schedule for any K.
inline constexpr int MMA_BLOCK_ELEMS = 2048;

// STEPS iterations of C chunks from element k, unrolled: the loads of later iterations may be issued
// before the mma of earlier ones (the loads are volatile asm, so they keep their order; the mma are not).
template <int PAIRS, int C, int STEPS>
__device__ __forceinline__ void mma_steps(float (&acc)[PAIRS][C][4], const uint32_t (&lane_row)[PAIRS],
                                          uint32_t x_addr, int k, int lane) {
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    MmaOperands<PAIRS, C> ops;
    ops.load(lane_row, x_addr, k + s * C * MMA_CHUNK, lane);
    ops.multiply(acc);
  }
}

// acc += the products of chunks [k_begin, k_end) in iterations of C chunks ((k_end - k_begin) a multiple
// of C chunks): whole blocks of MMA_BLOCK_ELEMS, then single iterations.
template <int PAIRS, int C>
__device__ __forceinline__ void mma_loop(float (&acc)[PAIRS][C][4], const uint32_t (&lane_row)[PAIRS],
                                         uint32_t x_addr, int k_begin, int k_end, int lane) {
  constexpr int STEPS = MMA_BLOCK_ELEMS / (C * MMA_CHUNK);
  static_assert(STEPS >= 1 && MMA_BLOCK_ELEMS % (C * MMA_CHUNK) == 0, "a block is whole iterations");
  int k = k_begin;
  for (; k + MMA_BLOCK_ELEMS <= k_end; k += MMA_BLOCK_ELEMS) mma_steps<PAIRS, C, STEPS>(acc, lane_row, x_addr, k, lane);
MK_ROLLED
  for (; k < k_end; k += C * MMA_CHUNK) mma_steps<PAIRS, C, 1>(acc, lane_row, x_addr, k, lane);
}

// out[out_row0 + r] = W[first + r] . x for r < nrows (<= 2 * PAIRS): rows of one page, K % MMA_CHUNK == 0.
// C chunks per iteration keep PAIRS * C accumulators in flight (each mma's latency overlaps the others).
template <int PAIRS, int C>
__device__ __forceinline__ void dot_rows_mma(uint32_t page_addr, int row_bytes, int first, int nrows, int K,
                                             uint32_t x_addr, float* out, int out_row0) {
  const int lane = tk::lane_id();
  uint32_t lane_row[PAIRS];
#pragma unroll
  for (int p = 0; p < PAIRS; ++p) {
    const int r = min(2 * p + ((lane >> 3) & 1), nrows - 1);  // a missing row repeats a real one (discarded)
    lane_row[p] = page_addr + (uint32_t)((first + r) * row_bytes + ((lane >> 4) & 1) * 128 + (lane & 7) * 16);
  }
  float acc[PAIRS][C][4];
#pragma unroll
  for (int p = 0; p < PAIRS; ++p)
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[p][c][i] = 0.f;
  const int k_main = K - K % (C * MMA_CHUNK);
  mma_loop<PAIRS, C>(acc, lane_row, x_addr, 0, k_main, lane);
  if constexpr (C > 1) {  // the chunks past the last whole iteration, one at a time
    float tail[PAIRS][1][4];
#pragma unroll
    for (int p = 0; p < PAIRS; ++p)
#pragma unroll
      for (int i = 0; i < 4; ++i) tail[p][0][i] = 0.f;
    // Fewer than C chunks: one at a time. mma_loop's unrolled block could never run here, yet its code sat
    // inside every page's loop (1B decode, H200: 0.779 -> 0.774 ms/token without it; code_size.cuh).
MK_ROLLED
    for (int k = k_main; k < K; k += MMA_CHUNK) mma_steps<PAIRS, 1, 1>(tail, lane_row, x_addr, k, lane);
#pragma unroll
    for (int p = 0; p < PAIRS; ++p)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[p][0][i] += tail[p][0][i];
  }
  // Lane l holds D[g][2t], D[g][2t + 1] (entries 0, 1) and D[g + 8][2t], D[g + 8][2t + 1] (entries 2, 3),
  // g = l / 4, t = l % 4. Row r's segment-q sum is D[8r + q][q]: entry 2r where g == 2t, entry 2r + 1
  // where g == 2t + 1 (lanes 0, 4, 9, 13, 18, 22, 27, 31).
  const int g = lane >> 2, t2 = 2 * (lane & 3);
  float v[2 * PAIRS];
#pragma unroll
  for (int p = 0; p < PAIRS; ++p)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float e0 = 0.f, e1 = 0.f;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        e0 += acc[p][c][2 * r];
        e1 += acc[p][c][2 * r + 1];
      }
      v[2 * p + r] = g == t2 ? e0 : (g == t2 + 1 ? e1 : 0.f);
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < 2 * PAIRS; ++r) v[r] += __shfl_xor_sync(tk::FULL_MASK, v[r], o);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < 2 * PAIRS; ++r)
      if (r < nrows) out[out_row0 + r] = v[r];
  }
}

// out[out_row0 + r] = W[r] . x for the `rows` rows of one page: 4 rows per call where the page has them
// (2 chunks each per iteration), else 2 rows with 4 chunks (a 16 KB page holds 1 row of 8192 elements).
__device__ __forceinline__ void dot_page_mma(uint32_t page_addr, int row_bytes, int rows, int K, uint32_t x_addr,
                                             float* out, int out_row0) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) dot_rows_mma<2, 2>(page_addr, row_bytes, r, 4, K, x_addr, out, out_row0 + r);
  for (; r < rows; r += 2) dot_rows_mma<1, 4>(page_addr, row_bytes, r, min(2, rows - r), K, x_addr, out, out_row0 + r);
}

}  // namespace mk::vm
