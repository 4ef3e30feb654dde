// rt_ops.cuh: element-wise maps and per-row reductions/broadcasts on fp32 register tiles
// (RMSNorm, SiLU, online softmax in attention).
#pragma once

#include "rt.cuh"

namespace mk::tk {

// dst(r, c) = f(r, c, src(r, c)) with (r, c) the element's coordinates in the whole tile.
template <int R, int C, rt_layout L, typename F>
__device__ __forceinline__ void apply(rt<float, R, C, L>& dst, const rt<float, R, C, L>& src, F f) {
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int2 c0 = fragment_coord<L>(lane, k, 0);
        const int2 c1 = fragment_coord<L>(lane, k, 1);
        const float2 v = src.tiles[i][j].data[k];
        dst.tiles[i][j].data[k] = make_float2(f(16 * i + c0.x, 16 * j + c0.y, v.x),
                                              f(16 * i + c1.x, 16 * j + c1.y, v.y));
      }
}

// dst = exp2(src) (exp2f: ex2.approx under --use_fast_math, accurate otherwise); softmax uses it
// with logits pre-scaled by log2(e).
template <int R, int C, rt_layout L>
__device__ __forceinline__ void exp2(rt<float, R, C, L>& dst, const rt<float, R, C, L>& src) {
  apply(dst, src, [](int, int, float x) { return exp2f(x); });
}

namespace detail {
struct op_sum {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct op_max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Row reduction of a row-layout fp32 tile: each lane folds its 4 values per fragment row, then
// the 4 lanes sharing a row (same g) combine with two xor-shuffles.
template <typename Op, int R, int C>
__device__ __forceinline__ void row_reduce(rt_col_vec<R>& dst, const rt<float, R, C>& src, Op op,
                                           bool accumulate) {
#pragma unroll
  for (int i = 0; i < R / 16; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row g (pairs 0, 2); h = 1: row g + 8 (pairs 1, 3)
      float acc = op(src.tiles[i][0].data[h].x, src.tiles[i][0].data[h].y);
      acc = op(acc, op(src.tiles[i][0].data[h + 2].x, src.tiles[i][0].data[h + 2].y));
#pragma unroll
      for (int j = 1; j < C / 16; ++j) {
        acc = op(acc, op(src.tiles[i][j].data[h].x, src.tiles[i][j].data[h].y));
        acc = op(acc, op(src.tiles[i][j].data[h + 2].x, src.tiles[i][j].data[h + 2].y));
      }
      acc = op(acc, __shfl_xor_sync(FULL_MASK, acc, 1));
      acc = op(acc, __shfl_xor_sync(FULL_MASK, acc, 2));
      dst.rows[i][h] = accumulate ? op(dst.rows[i][h], acc) : acc;
    }
  }
}

template <typename F, int R, int C>
__device__ __forceinline__ void row_broadcast(rt<float, R, C>& dst, const rt<float, R, C>& src,
                                              const rt_col_vec<R>& v, F f) {
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float s = v.rows[i][k % 2];
        const float2 x = src.tiles[i][j].data[k];
        dst.tiles[i][j].data[k] = make_float2(f(x.x, s), f(x.y, s));
      }
}
}  // namespace detail

// dst[r] = sum_c src(r, c)  (or dst[r] += ... with accumulate). Row-layout fp32 tiles only.
template <int R, int C>
__device__ __forceinline__ void row_sum(rt_col_vec<R>& dst, const rt<float, R, C>& src,
                                        bool accumulate = false) {
  detail::row_reduce(dst, src, detail::op_sum{}, accumulate);
}

// dst[r] = max_c src(r, c)  (or max(dst[r], ...) with accumulate).
template <int R, int C>
__device__ __forceinline__ void row_max(rt_col_vec<R>& dst, const rt<float, R, C>& src,
                                        bool accumulate = false) {
  detail::row_reduce(dst, src, detail::op_max{}, accumulate);
}

// dst(r, c) = src(r, c) - v[r]
template <int R, int C>
__device__ __forceinline__ void sub_row(rt<float, R, C>& dst, const rt<float, R, C>& src,
                                        const rt_col_vec<R>& v) {
  detail::row_broadcast(dst, src, v, [](float x, float s) { return x - s; });
}

// dst(r, c) = src(r, c) * v[r]
template <int R, int C>
__device__ __forceinline__ void mul_row(rt<float, R, C>& dst, const rt<float, R, C>& src,
                                        const rt_col_vec<R>& v) {
  detail::row_broadcast(dst, src, v, [](float x, float s) { return x * s; });
}

// dst(r, c) = src(r, c) / v[r]
template <int R, int C>
__device__ __forceinline__ void div_row(rt<float, R, C>& dst, const rt<float, R, C>& src,
                                        const rt_col_vec<R>& v) {
  detail::row_broadcast(dst, src, v, [](float x, float s) { return x / s; });
}

}  // namespace mk::tk
