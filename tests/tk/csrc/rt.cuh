// rt.cuh: register tiles made of 16x16 base fragments in the mma.sync m16n8k16 layout.
//
// Fragment (per lane, g = lane / 4, t = lane % 4), four packed pairs data[0..3]:
//   row layout: data[k] holds (row g + 8*(k%2), cols 2t, 2t+1 + 8*(k/2))   -- A operand, C/D
//   col layout: data[k] holds (rows 2t, 2t+1 + 8*(k/2), col g + 8*(k%2))   -- B operand of A*B
// A col-layout tile is thus the row layout of the transposed tile: mma_AB(a, b_col) runs the same
// instructions as mma_ABt(a, b_row) with b_row = b_col^T.
#pragma once

#include "tk/util.cuh"

namespace mk::tk {

enum class rt_layout { row, col };

template <typename T>
struct packed;
template <>
struct packed<float> {
  using type = float2;
};
template <>
struct packed<bf16> {
  using type = bf16_2;
};
template <typename T>
using packed_t = typename packed<T>::type;

// Coordinates (inside a 16x16 fragment) of element `half` (0/1) of pair `k` (0..3) of this lane.
template <rt_layout L>
__device__ __forceinline__ int2 fragment_coord(int lane, int k, int half) {
  const int g = lane / 4, t = lane % 4;
  const int major = g + 8 * (k % 2);           // row (row layout) / col (col layout)
  const int minor = 2 * t + half + 8 * (k / 2);  // col (row layout) / row (col layout)
  if constexpr (L == rt_layout::row) {
    return make_int2(major, minor);
  } else {
    return make_int2(minor, major);
  }
}

template <typename T, rt_layout L = rt_layout::row>
struct rt_base {
  static constexpr rt_layout layout = L;
  packed_t<T> data[4];
};

// Per-row values of a row-layout tile (row_sum / row_max results, softmax statistics):
// rows[i][0] is row 16i + g, rows[i][1] is row 16i + g + 8, replicated over the 4 lanes of group g.
template <int R>
struct rt_col_vec {
  static_assert(R > 0 && R % 16 == 0, "rt_col_vec: rows must be a multiple of 16");
  static constexpr int ROWS = R;
  float rows[R / 16][2];
};

template <typename T, int R, int C, rt_layout L = rt_layout::row>
struct rt {
  static_assert(R > 0 && R % 16 == 0, "rt: rows must be a multiple of 16");
  static_assert(C > 0 && C % 16 == 0, "rt: cols must be a multiple of 16");
  using dtype = T;
  static constexpr rt_layout layout = L;
  static constexpr int ROWS = R;
  static constexpr int COLS = C;
  static constexpr int HEIGHT = R / 16;  // fragments down
  static constexpr int WIDTH = C / 16;   // fragments across
  using col_vec = rt_col_vec<R>;
  rt_base<T, L> tiles[HEIGHT][WIDTH];
};

template <int R, int C, rt_layout L = rt_layout::row>
using rt_fl = rt<float, R, C, L>;
template <int R, int C, rt_layout L = rt_layout::row>
using rt_bf = rt<bf16, R, C, L>;

__device__ __forceinline__ float2 to_float2(float2 v) { return v; }
__device__ __forceinline__ float2 to_float2(bf16_2 v) { return __bfloat1622float2(v); }
template <typename P>
__device__ __forceinline__ P from_float2(float2 v);
template <>
__device__ __forceinline__ float2 from_float2<float2>(float2 v) { return v; }
template <>
__device__ __forceinline__ bf16_2 from_float2<bf16_2>(float2 v) { return __float22bfloat162_rn(v); }

// dst = src with dtype conversion (fp32 <-> bf16, round-to-nearest-even); same shape and layout.
template <typename TD, typename TS, int R, int C, rt_layout L>
__device__ __forceinline__ void copy(rt<TD, R, C, L>& dst, const rt<TS, R, C, L>& src) {
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        dst.tiles[i][j].data[k] = from_float2<packed_t<TD>>(to_float2(src.tiles[i][j].data[k]));
}

template <typename T, int R, int C, rt_layout L>
__device__ __forceinline__ void fill(rt<T, R, C, L>& dst, float value) {
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k)
        dst.tiles[i][j].data[k] = from_float2<packed_t<T>>(make_float2(value, value));
}

template <typename T, int R, int C, rt_layout L>
__device__ __forceinline__ void zero(rt<T, R, C, L>& dst) {
  fill(dst, 0.0f);
}

}  // namespace mk::tk
