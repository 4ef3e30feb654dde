// mma_tiles.cuh: warp-level bf16 tensor-core products on register tiles (mma.sync m16n8k16, fp32
// accumulate). d may alias c.
#pragma once

#include "rt.cuh"
#include "tk/mma.cuh"

namespace mk::tk {

namespace detail {
// d(16x8) = a(16x16) * b(16x8) + c, one instruction; b0/b1 hold k rows 0-7 / 8-15.
__device__ __forceinline__ void mma_16x8x16(float2& d_top, float2& d_bot, const bf16_2 (&a)[4],
                                            bf16_2 b0, bf16_2 b1, float2 c_top, float2 c_bot) {
  const uint32_t* ar = reinterpret_cast<const uint32_t*>(a);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
      : "=f"(d_top.x), "=f"(d_top.y), "=f"(d_bot.x), "=f"(d_bot.y)
      : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(*reinterpret_cast<uint32_t*>(&b0)),
        "r"(*reinterpret_cast<uint32_t*>(&b1)), "f"(c_top.x), "f"(c_top.y), "f"(c_bot.x),
        "f"(c_bot.y));
}

}  // namespace detail

// d = a * b^T + c with a [M, K] (row), b [N, K] (row): q @ k^T in attention.
template <int M, int N, int K>
__device__ __forceinline__ void mma_ABt(rt<float, M, N>& d, const rt<bf16, M, K>& a,
                                        const rt<bf16, N, K>& b, const rt<float, M, N>& c) {
#pragma unroll
  for (int i = 0; i < M / 16; ++i)
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      float2 acc[4] = {c.tiles[i][j].data[0], c.tiles[i][j].data[1], c.tiles[i][j].data[2],
                       c.tiles[i][j].data[3]};
#pragma unroll
      for (int k = 0; k < K / 16; ++k) {
        const rt_base<bf16>& bt = b.tiles[j][k];
        // n columns 0-7 of this d fragment -> acc[0], acc[1]; columns 8-15 -> acc[2], acc[3].
        detail::mma_16x8x16(acc[0], acc[1], a.tiles[i][k].data, bt.data[0], bt.data[2], acc[0],
                            acc[1]);
        detail::mma_16x8x16(acc[2], acc[3], a.tiles[i][k].data, bt.data[1], bt.data[3], acc[2],
                            acc[3]);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) d.tiles[i][j].data[q] = acc[q];
    }
}

// d = a * b + c with a [M, K] (row), b [K, N] (col layout, e.g. loaded with ldmatrix.trans):
// p @ v in attention.
template <int M, int N, int K>
__device__ __forceinline__ void mma_AB(rt<float, M, N>& d, const rt<bf16, M, K>& a,
                                       const rt<bf16, K, N, rt_layout::col>& b,
                                       const rt<float, M, N>& c) {
#pragma unroll
  for (int i = 0; i < M / 16; ++i)
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      float2 acc[4] = {c.tiles[i][j].data[0], c.tiles[i][j].data[1], c.tiles[i][j].data[2],
                       c.tiles[i][j].data[3]};
#pragma unroll
      for (int k = 0; k < K / 16; ++k) {
        const rt_base<bf16, rt_layout::col>& bt = b.tiles[k][j];
        detail::mma_16x8x16(acc[0], acc[1], a.tiles[i][k].data, bt.data[0], bt.data[2], acc[0],
                            acc[1]);
        detail::mma_16x8x16(acc[2], acc[3], a.tiles[i][k].data, bt.data[1], bt.data[3], acc[2],
                            acc[3]);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) d.tiles[i][j].data[q] = acc[q];
    }
}

}  // namespace mk::tk
