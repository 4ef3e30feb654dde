// dot_short_rows.cuh: the page matvec for short weight rows (K <= 256: one 8-element vector per lane
// covers a row), as ATTN_O_PROJ streams them (K = heads x head_dim of W_o's columns).
//
// Why a separate path: dot_rows reduces every row with its own 5-level butterfly, which is cheap next
// to a long row's FMAs but dominates when a 16 KB page holds 32+ short rows (measured: 2.5 µs for the
// last page of a 256-wide ATTN_O_PROJ against 1 µs for a 2048-wide O-proj page). Here 8 rows are
// reduced together by a reduce-scatter: each of the first three levels halves the rows a lane keeps
// while summing over lane pairs, so 8 rows cost 4 + 2 + 1 + 2 = 9 shuffles instead of 40, and lane
// 4j ends up holding row j.
#pragma once

#include "../tk/shared_vec.cuh"
#include "../tk/util.cuh"
#include "bf16_unpack.cuh"

namespace mk::vm {

inline constexpr int SHORT_ROW_MAX_K = 256;  // 32 lanes x 8 elements

// Keeps, of the pair (lo, hi), the half selected by `upper` and adds the partner lane's same half
// (the partner, `mask` lanes away, selects the other one).
__device__ __forceinline__ float keep_and_add(float lo, float hi, bool upper, int mask) {
  const float give = upper ? lo : hi;
  return (upper ? hi : lo) + __shfl_xor_sync(tk::FULL_MASK, give, mask);
}

// Groups of 8 rows handled per call: two for one activation row, so that two independent load ->
// FMA -> shuffle chains overlap (one chain alone is latency-bound: ≈ 0.4 µs per 8 rows measured); one at
// NX >= 2, where two groups spilled registers.
template <int NX>
inline constexpr int SHORT_GROUPS = NX == 1 ? 2 : 1;
template <int NX>
inline constexpr int SHORT_ROWS_PER_CALL = 8 * SHORT_GROUPS<NX>;

// out[t * out_stride + out_row0 + r] = W[first + r] . x[t] for r < nrows (<= SHORT_ROWS_PER_CALL<NX>),
// t < nx (<= NX).
template <int NX>
__device__ __forceinline__ void dot_short_rows(uint32_t page_addr, int row_bytes, int first, int nrows, int K,
                                               uint32_t x_addr, int nx, float* out, int out_row0, int out_stride) {
  constexpr int G = SHORT_GROUPS<NX>, R = 8 * G;
  const int lane = tk::lane_id(), k = lane * 8;
  const bool in_k = k < K;
  uint4 raw[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    raw[r] = tk::load_shared_u4_if(page_addr + (uint32_t)((first + r) * row_bytes + k * 2), in_k && r < nrows);
  const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
  // One activation row at a time: the weight vectors already take 4 registers per row, and all NX rows of
  // x on top (64 more at NX = 8) made the matvec spill.
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    const uint32_t a = x_addr + (uint32_t)(t * K + k) * 4;
    const float4 xa = tk::load_shared_f4_if(a, in_k && t < nx), xb = tk::load_shared_f4_if(a + 16, in_k && t < nx);
    float v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float wv[8];
      bf16x8_to_float(raw[r], wv);
      float lo = wv[0] * xa.x, hi = wv[4] * xb.x;
      lo = fmaf(wv[1], xa.y, lo);
      hi = fmaf(wv[5], xb.y, hi);
      lo = fmaf(wv[2], xa.z, lo);
      hi = fmaf(wv[6], xb.z, hi);
      lo = fmaf(wv[3], xa.w, lo);
      hi = fmaf(wv[7], xb.w, hi);
      v[r] = lo + hi;
    }
    float s[G];
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {  // independent chains: the compiler interleaves them
      const float* u = v + 8 * gi;
      float h[4], q[2];
#pragma unroll
      for (int j = 0; j < 4; ++j) h[j] = keep_and_add(u[j], u[j + 4], b4, 16);  // rows 4*b4 + j
#pragma unroll
      for (int j = 0; j < 2; ++j) q[j] = keep_and_add(h[j], h[j + 2], b3, 8);   // rows 4*b4 + 2*b3 + j
      s[gi] = keep_and_add(q[0], q[1], b2, 4);                                  // row lane >> 2
    }
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
      s[gi] += __shfl_xor_sync(tk::FULL_MASK, s[gi], 2);
      s[gi] += __shfl_xor_sync(tk::FULL_MASK, s[gi], 1);
    }
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
      const int row = 8 * gi + (lane >> 2);
      if ((lane & 3) == 0 && row < nrows && t < nx) out[t * out_stride + out_row0 + row] = s[gi];
    }
  }
}

}  // namespace mk::vm
