// rows_in_flight.cuh: loading SEVERAL activation rows into shared x with the loads of every row in flight
// together (prompt chunks, batched decodes).
//
// Why: the one-row loaders (activations.cuh) go row after row, and each row is one round trip to L2 right after
// a dependency wait, while the other SMs' weight streams saturate HBM (~0.5 µs each). With 8 rows that was the
// input phase of every weight-streaming instruction of an 8-token step: 4.8 µs of an RMS_QKV_ROPE_APPEND against
// 0.9 µs for one token (profile --batch 8, 1B shape, H200), on the critical path of every layer. Here each thread
// walks its share of all rows (the same columns of every row) with ROWS_LOADS_IN_FLIGHT loads issued before
// any is used.
//
// Each thread owns the same columns of every row (K a multiple of 4 * CONSUMER_THREADS), so a warp's lanes
// change rows together and a warp's part of a row's sum of squares is one warp reduction.
#pragma once

#include "code_size.cuh"

#include "state.cuh"
#include "x_layout.cuh"

namespace mk::vm {

inline constexpr int ROWS_LOADS_IN_FLIGHT = 4;  // 8 spilled registers in the general kernel
inline constexpr int ROWS_COLUMN_STEP = 4 * CONSUMER_THREADS;  // columns all threads cover with one float4 each

// Whether rows of K floats, `stride` apart from `src`, take this path: 16-byte aligned, whole column steps.
__device__ __forceinline__ bool rows_in_flight_ok(const float* src, long long stride, int K) {
  return K % ROWS_COLUMN_STEP == 0 && stride % 4 == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0;
}

// The row and this thread's float4 column of its j-th load (j over all rows, row-major).
struct RowsWalk {
  int per_row;  // float4 loads per thread per row
  __device__ __forceinline__ int row(int j) const { return j / per_row; }
  __device__ __forceinline__ int col4(int j, int row) const { return (j - row * per_row) * CONSUMER_THREADS + threadIdx.x; }
};

// x[i][k] = src[row_of(i) * stride + k] for i < nx, k < K (bf16 when as_bf16; rows `pitch` elements apart).
template <typename RowOf>
__device__ __forceinline__ void copy_rows_in_flight(const Shared& sm, const float* src, long long stride, int nx, int K,
                                                    RowOf row_of, bool as_bf16, int pitch) {
  const RowsWalk walk{K / ROWS_COLUMN_STEP};
  const int total = nx * walk.per_row;
  MK_ROLLED
  for (int j0 = 0; j0 < total; j0 += ROWS_LOADS_IN_FLIGHT) {
    float4 v[ROWS_LOADS_IN_FLIGHT];
#pragma unroll
    for (int u = 0; u < ROWS_LOADS_IN_FLIGHT; ++u) {
      const int j = j0 + u, r = walk.row(j);
      if (j < total) v[u] = __ldcg(reinterpret_cast<const float4*>(src + (long long)row_of(r) * stride) + walk.col4(j, r));
    }
#pragma unroll
    for (int u = 0; u < ROWS_LOADS_IN_FLIGHT; ++u) {
      const int j = j0 + u, r = walk.row(j);
      if (j < total) store_x4(x_row(sm, r, pitch, as_bf16), 4 * walk.col4(j, r), v[u], as_bf16);
    }
  }
}

// This warp's part of row r's sum of squares into shared scratch, as load_rows_rmsnorm leaves it for rms_inv.
__device__ __forceinline__ void put_row_sumsq(const Shared& sm, int r, float ss) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(tk::FULL_MASK, ss, o);
  if (tk::lane_id() == 0) sm.scratch[r * NUM_CONSUMER_WARPS + tk::warp_id()] = ss;
}

// x[i][k] = w[k] * src_row(i)[k] for i < nx, k < H (rows H floats apart at src), each row's sum of squares in
// scratch per warp (activations.cuh load_rows_rmsnorm; rms_inv reads them).
template <typename RowOf>
__device__ __forceinline__ void copy_scaled_rows_in_flight(const Shared& sm, const float* src, int nx, int H,
                                                           const bf16* weight, RowOf row_of, bool as_bf16, int pitch) {
  const RowsWalk walk{H / ROWS_COLUMN_STEP};
  const int total = nx * walk.per_row;
  const uint2* w4 = reinterpret_cast<const uint2*>(weight);  // four bf16
  float ss = 0.f;
  int row = 0;  // the row ss sums (every thread of the block walks the same rows at the same j)
  MK_ROLLED
  for (int j0 = 0; j0 < total; j0 += ROWS_LOADS_IN_FLIGHT) {
    float4 v[ROWS_LOADS_IN_FLIGHT];
    uint2 wv[ROWS_LOADS_IN_FLIGHT];
#pragma unroll
    for (int u = 0; u < ROWS_LOADS_IN_FLIGHT; ++u) {
      const int j = j0 + u, r = walk.row(j), c = walk.col4(j, r);
      if (j < total) {
        v[u] = __ldcg(reinterpret_cast<const float4*>(src + (long long)row_of(r) * H) + c);
        wv[u] = w4[c];
      }
    }
#pragma unroll
    for (int u = 0; u < ROWS_LOADS_IN_FLIGHT; ++u) {
      const int j = j0 + u, r = walk.row(j), c = walk.col4(j, r);
      if (j < total) {
        if (r != row) {  // uniform over the block: j, per_row and total are the same in every thread
          put_row_sumsq(sm, row, ss);
          ss = 0.f;
          row = r;
        }
        store_x4(x_row(sm, r, pitch, as_bf16), 4 * c, scale4_sumsq(v[u], wv[u], ss), as_bf16);
      }
    }
  }
  put_row_sumsq(sm, row, ss);
}

}  // namespace mk::vm
