// load_store.cuh: moves between register tiles and shared tiles (ldmatrix / ldmatrix.trans for
// bf16; element pairs otherwise) and between register tiles and plain row-major global memory.
#pragma once

#include "rt.cuh"
#include "tk/shared_vec.cuh"
#include "st.cuh"

#include <type_traits>

namespace mk::tk {

namespace detail {
// Four 8x8 b16 matrices; lane l supplies the row address of matrix l / 8 (tk/shared_vec.cuh's ldmatrix_x4_shared
// on a generic pointer into shared memory).
__device__ __forceinline__ void ldmatrix_x4(bf16_2 (&d)[4], const void* row_addr) {
  ldmatrix_x4_shared(reinterpret_cast<uint32_t(&)[4]>(d), smem_addr(row_addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(bf16_2 (&d)[4], const void* row_addr) {
  uint32_t* r = reinterpret_cast<uint32_t*>(d);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (sizeof(T) == 2) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}
template <typename T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (sizeof(T) == 2) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}
}  // namespace detail

// dst <- src (bf16 shared tile or view, whole warp). Row layout: ldmatrix; col layout:
// ldmatrix.trans, so dst is ready as the B operand of mma_AB.
template <int R, int C, rt_layout L, shared_tile S>
__device__ __forceinline__ void load(rt<bf16, R, C, L>& dst, const S& src) {
  static_assert(S::ROWS == R && S::COLS == C, "load(rt, st): shapes differ");
  static_assert(sizeof(typename S::dtype) == 2, "load(rt_bf, st): source must be bf16");
  const int lane = lane_id();
  const int m = lane / 8, r8 = lane % 8;
  // Matrix m covers 8x8 block (m%2, m/2) for row layout and (m/2, m%2) for col layout.
  const int blk_r = (L == rt_layout::row) ? m % 2 : m / 2;
  const int blk_c = (L == rt_layout::row) ? m / 2 : m % 2;
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j) {
      const void* addr = src.idx(16 * i + 8 * blk_r + r8, 16 * j + 8 * blk_c);
      if constexpr (L == rt_layout::row) {
        detail::ldmatrix_x4(dst.tiles[i][j].data, addr);
      } else {
        detail::ldmatrix_x4_trans(dst.tiles[i][j].data, addr);
      }
    }
}

// fp32 destination: bf16 sources go through ldmatrix then convert; fp32 sources are read as pairs.
template <int R, int C, rt_layout L, shared_tile S>
__device__ __forceinline__ void load(rt<float, R, C, L>& dst, const S& src) {
  static_assert(S::ROWS == R && S::COLS == C, "load(rt, st): shapes differ");
  using TS = typename S::dtype;
  if constexpr (sizeof(TS) == 2) {
    rt<bf16, R, C, L> tmp;
    load(tmp, src);
    copy(dst, tmp);
  } else {
    const int lane = lane_id();
#pragma unroll
    for (int i = 0; i < R / 16; ++i)
#pragma unroll
      for (int j = 0; j < C / 16; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int2 a = fragment_coord<L>(lane, k, 0);
          const int2 b = fragment_coord<L>(lane, k, 1);
          dst.tiles[i][j].data[k] = make_float2(*src.idx(16 * i + a.x, 16 * j + a.y),
                                                *src.idx(16 * i + b.x, 16 * j + b.y));
        }
  }
}

// dst <- src with conversion to the shared tile's dtype (element pairs; whole warp).
template <shared_tile S, typename T, int R, int C, rt_layout L>
__device__ __forceinline__ void store(const S& dst, const rt<T, R, C, L>& src) {
  static_assert(S::ROWS == R && S::COLS == C, "store(st, rt): shapes differ");
  using TD = std::remove_cv_t<typename S::dtype>;
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int2 a = fragment_coord<L>(lane, k, 0);
        const int2 b = fragment_coord<L>(lane, k, 1);
        const float2 v = to_float2(src.tiles[i][j].data[k]);
        *const_cast<TD*>(dst.idx(16 * i + a.x, 16 * j + a.y)) = detail::from_float<TD>(v.x);
        *const_cast<TD*>(dst.idx(16 * i + b.x, 16 * j + b.y)) = detail::from_float<TD>(v.y);
      }
}

// dst <- src[row * ld + col], plain row-major global (or generic) memory, any 2/4-byte dtype.
template <typename TS, typename T, int R, int C, rt_layout L>
__device__ __forceinline__ void load(rt<T, R, C, L>& dst, const TS* src, int ld) {
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int2 a = fragment_coord<L>(lane, k, 0);
        const int2 b = fragment_coord<L>(lane, k, 1);
        const float x = detail::to_float(src[(16 * i + a.x) * ld + 16 * j + a.y]);
        const float y = detail::to_float(src[(16 * i + b.x) * ld + 16 * j + b.y]);
        dst.tiles[i][j].data[k] = from_float2<packed_t<T>>(make_float2(x, y));
      }
}

// dst[row * ld + col] <- src, plain row-major global (or generic) memory.
template <typename TD, typename T, int R, int C, rt_layout L>
__device__ __forceinline__ void store(TD* dst, int ld, const rt<T, R, C, L>& src) {
  const int lane = lane_id();
#pragma unroll
  for (int i = 0; i < R / 16; ++i)
#pragma unroll
    for (int j = 0; j < C / 16; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int2 a = fragment_coord<L>(lane, k, 0);
        const int2 b = fragment_coord<L>(lane, k, 1);
        const float2 v = to_float2(src.tiles[i][j].data[k]);
        dst[(16 * i + a.x) * ld + 16 * j + a.y] = detail::from_float<TD>(v.x);
        dst[(16 * i + b.x) * ld + 16 * j + b.y] = detail::from_float<TD>(v.y);
      }
}

}  // namespace mk::tk
