// dot_tokens_mma.cuh: the page matvec for SEVERAL activation rows (batched decode, prompt chunks) on the
// tensor cores.
//
// Why: on CUDA cores (consumer_matvec.cuh dot_rows) every weight is unpacked and multiplied once per
// activation row, and every row of x is read from shared memory again for every pair of weight rows: for 8
// rows a 16 KB page of 2048-wide rows costs 64K FMAs and 128 KB of shared loads per warp, so a step of 8
// tokens took several times a one-token step although both read the same weights. Here one mma.sync
// m16n8k16 multiplies 16 x-rows by 8 weight columns, and every weight and x element is read once per page.
//
// The mapping (4 weight rows of the page at a time, each row's k cut in two interleaved splits): a k-step
// covers 32 columns, split s = columns [16s, 16s + 16) of it. B's column n = 4s + r is split s of weight row r
// (read straight from the page: B is k-major, as W's rows are). A's row m = 8s + t is split s of x row t.
// D[8s + t][4s + r] is then token t's dot product with row r over split s; the entries whose splits differ
// are discarded (half of each product: the price of pages that hold only 4 rows of 2048), and the two splits
// are summed with one shuffle at the end. x rows are X_ROW_SKEW elements longer than K, so ldmatrix's 8 rows
// of x fall in different banks; the 4 weight rows of a page share banks (4-way conflicts on the B loads,
// which are a third of the shared traffic).
#pragma once

#include "code_size.cuh"
#include "config.cuh"

#include "../tk/mma.cuh"
#include "../tk/shared_vec.cuh"
#include "../tk/util.cuh"

namespace mk::vm {

inline constexpr int TOKENS_MMA_ROWS = 4;   // weight rows per product (B's 8 columns: 4 rows x 2 splits)
inline constexpr int TOKENS_MMA_STEP = 32;  // k columns per product (2 splits of 16)
inline constexpr int TOKENS_MMA_ITER = 4;   // products per loop iteration, into independent accumulators
static_assert(TOKENS_MMA_ITER * TOKENS_MMA_STEP == 128, "an iteration covers one MMA_CHUNK (mma_row_ok's K unit)");

// out[t * out_stride + out_row0 + r] = W[first + r] . x[t] for r < nrows (<= 4) and t < nx (<= 8 * HALVES). x: bf16
// rows of `x_pitch` elements at x_addr; K a multiple of 128. HALVES = 2 takes a token group of up to 16 rows as two
// halves of 8 that share each k-step's weight fragments: the weights' shared loads are the 4-way-conflicted third of
// the traffic (above), so loading them once for 16 rows instead of once per 8 saves a third of a group's page time.
template <int HALVES>
__device__ __forceinline__ void dot_rows_tokens_mma(uint32_t page_addr, int row_bytes, int first, int nrows, int K,
                                                    uint32_t x_addr, int x_pitch, int nx, float* out, int out_row0,
                                                    int out_stride) {
  static_assert(HALVES == 1 || HALVES == 2, "one or two halves of 8 x rows");
  const int lane = tk::lane_id(), mat = lane >> 3;
  // B: this lane's ldmatrix row is column n = lane % 8 (split n / 4, row n % 4) of matrix `mat`: matrices 0, 1
  // are k 0-7 and 8-15 of one k-step, 2, 3 the same of the next. A missing row repeats a real one (discarded).
  const int n = lane & 7, w_row = min(n & 3, nrows - 1);
  const uint32_t b_lane = page_addr + (uint32_t)((first + w_row) * row_bytes) +
                          (uint32_t)((16 * (n >> 2) + 8 * (mat & 1) + TOKENS_MMA_STEP * (mat >> 1)) * 2);
  // A: row m = lane % 8 + 8 (mat % 2) of the product (split m / 8, token m % 8), k 8 (mat / 2) of the split.
  // Tokens past nx repeat the last real one (their results are discarded).
  const int m = (lane & 7) + 8 * (mat & 1);
  uint32_t a_lane[HALVES];
#pragma unroll
  for (int h = 0; h < HALVES; ++h) {
    const int token = min(8 * h + (m & 7), nx - 1);
    a_lane[h] = x_addr + (uint32_t)(token * x_pitch * 2) + (uint32_t)((16 * (m >> 3) + 8 * (mat >> 1)) * 2);
  }
  float acc[HALVES][TOKENS_MMA_ITER][4];
#pragma unroll
  for (int h = 0; h < HALVES; ++h)
#pragma unroll
    for (int u = 0; u < TOKENS_MMA_ITER; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[h][u][i] = 0.f;
  // Unrolled 4 times (a 2048-wide row in 4 trips): the shared loads of later iterations are issued ahead of the
  // products of earlier ones (the loads are volatile asm and keep their order; the mma are not).
#pragma unroll 4
  for (int k = 0; k < K; k += TOKENS_MMA_ITER * TOKENS_MMA_STEP) {
    uint32_t a[HALVES][TOKENS_MMA_ITER][4], b[TOKENS_MMA_ITER / 2][4];
#pragma unroll
    for (int h = 0; h < TOKENS_MMA_ITER / 2; ++h)
      tk::ldmatrix_x4_shared(b[h], b_lane + (uint32_t)(k + 2 * h * TOKENS_MMA_STEP) * 2);
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
#pragma unroll
      for (int u = 0; u < TOKENS_MMA_ITER; ++u)
        tk::ldmatrix_x4_shared(a[h][u], a_lane[h] + (uint32_t)(k + u * TOKENS_MMA_STEP) * 2);
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
#pragma unroll
      for (int u = 0; u < TOKENS_MMA_ITER; ++u)
        tk::detail::mma_16x8x16_acc(acc[h][u], a[h][u], b[u / 2][2 * (u % 2)], b[u / 2][2 * (u % 2) + 1]);
  }
  // Lane l holds D[g][2q], D[g][2q + 1] (entries 0, 1: split 0 of token g) and D[g + 8][2q], D[g + 8][2q + 1]
  // (entries 2, 3: split 1), g = l / 4, q = l % 4; columns 2q, 2q + 1 are split q / 2 of rows 2 (q % 2), +1.
  // Matching splits: entries 0, 1 where q < 2, entries 2, 3 where q >= 2; lanes q and q + 2 hold the two
  // splits of the same token and rows.
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int h = 0; h < HALVES; ++h) {
    float v[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float e = 0.f;
#pragma unroll
      for (int u = 0; u < TOKENS_MMA_ITER; ++u) e += q < 2 ? acc[h][u][j] : acc[h][u][2 + j];
      v[j] = e + __shfl_xor_sync(tk::FULL_MASK, e, 2);
    }
    const int t = 8 * h + g;
    if (q < 2 && t < nx) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = 2 * q + j;
        if (r < nrows) out[t * out_stride + out_row0 + r] = v[j];
      }
    }
  }
}

// The `rows` rows of one page against nx (<= MAX_TOKEN_GROUP) bf16 x rows, 4 rows per product; more than 8 x rows
// as two halves sharing the weight fragments.
__device__ __forceinline__ void dot_page_tokens_mma(uint32_t page_addr, int row_bytes, int rows, int K, uint32_t x_addr,
                                                    int x_pitch, int nx, float* out, int out_row0, int out_stride) {
  static_assert(MAX_TOKEN_GROUP <= 2 * MAX_TOKENS_PER_MATVEC, "a token group is at most two halves of 8 rows");
  if (nx > MAX_TOKENS_PER_MATVEC) {
    MK_ROLLED
    for (int r = 0; r < rows; r += TOKENS_MMA_ROWS)
      dot_rows_tokens_mma<2>(page_addr, row_bytes, r, min(TOKENS_MMA_ROWS, rows - r), K, x_addr, x_pitch, nx, out,
                             out_row0 + r, out_stride);
  } else {
    MK_ROLLED
    for (int r = 0; r < rows; r += TOKENS_MMA_ROWS)
      dot_rows_tokens_mma<1>(page_addr, row_bytes, r, min(TOKENS_MMA_ROWS, rows - r), K, x_addr, x_pitch, nx, out,
                             out_row0 + r, out_stride);
  }
}

}  // namespace mk::vm
