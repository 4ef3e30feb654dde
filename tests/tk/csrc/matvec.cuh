// matvec.cuh: the batch-1 decode hot path. One warp computes ROWS dot products of bf16 weight
// rows with an fp32 vector: 16-byte weight loads (8 bf16 per lane, 256 columns per warp step),
// ROWS independent loads in flight per step, fp32 FMA, then a shuffle reduction.
// Plain FMA is enough: a bf16 GEMV does ~1 FLOP per weight byte, far below CUDA-core throughput.
#pragma once

#include "warp_reduce.cuh"

namespace mk::tk {

enum class mem_space { global, shared };

namespace detail {
template <mem_space S>
__device__ __forceinline__ uint4 load_16B(const bf16* p) {
  if constexpr (S == mem_space::global) {
    // Read-only, streamed once: bypass L1 allocation.
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  } else {
    return *reinterpret_cast<const uint4*>(p);
  }
}

__device__ __forceinline__ float dot8(uint4 w, const float4& x0, const float4& x1, float acc) {
  const float2 a = __bfloat1622float2(*reinterpret_cast<const bf16_2*>(&w.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const bf16_2*>(&w.y));
  const float2 c = __bfloat1622float2(*reinterpret_cast<const bf16_2*>(&w.z));
  const float2 d = __bfloat1622float2(*reinterpret_cast<const bf16_2*>(&w.w));
  acc = fmaf(a.x, x0.x, acc);
  acc = fmaf(a.y, x0.y, acc);
  acc = fmaf(b.x, x0.z, acc);
  acc = fmaf(b.y, x0.w, acc);
  acc = fmaf(c.x, x1.x, acc);
  acc = fmaf(c.y, x1.y, acc);
  acc = fmaf(d.x, x1.z, acc);
  acc = fmaf(d.y, x1.w, acc);
  return acc;
}
}  // namespace detail

// out[r] = sum_{c < k} w[r * ld + c] * x[c] for r < ROWS, returned to every lane (whole warp).
// Preconditions: k % 8 == 0, ld % 8 == 0, w and x 16-byte aligned. WS says where w lives
// (global: non-coherent streaming loads; shared: e.g. a page filled by bulk_load). x is read with
// generic 16-byte loads (shared or global).
template <int ROWS, mem_space WS = mem_space::global>
__device__ __forceinline__ void warp_matvec(float (&out)[ROWS], const bf16* w, int ld,
                                            const float* x, int k) {
  static_assert(ROWS > 0 && ROWS <= 32, "warp_matvec: 1..32 rows per call");
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  for (int c = lane_id() * 8; c < k; c += WARP_THREADS * 8) {
    uint4 wv[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) wv[r] = detail::load_16B<WS>(w + size_t(r) * ld + c);
    const float4 x0 = *reinterpret_cast<const float4*>(x + c);
    const float4 x1 = *reinterpret_cast<const float4*>(x + c + 4);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = detail::dot8(wv[r], x0, x1, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) out[r] = warp_sum(acc[r]);
}

}  // namespace mk::tk
