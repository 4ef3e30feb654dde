// rv.cuh: register vectors in the "naive" layout: element i lives in lane i % 32, slot i / 32.
// For vector math (norm statistics, activations) where each lane works on its own elements.
#pragma once

#include "warp_reduce.cuh"
#include "sv.cuh"

#include <type_traits>

namespace mk::tk {

template <typename T, int N>
struct rv {
  static_assert(N > 0 && N % WARP_THREADS == 0, "rv: length must be a multiple of 32");
  using dtype = T;
  static constexpr int LENGTH = N;
  static constexpr int SLOTS = N / WARP_THREADS;
  T data[SLOTS];
};

template <int N>
using rv_fl = rv<float, N>;

namespace detail {
template <typename TD, typename TS>
__device__ __forceinline__ TD convert(TS x) {
  if constexpr (std::is_same_v<TD, TS>) {
    return x;
  } else if constexpr (std::is_same_v<TD, float>) {
    return __bfloat162float(x);
  } else {
    return __float2bfloat16_rn(x);
  }
}
}  // namespace detail

// dst <- src (shared or global, contiguous), with dtype conversion. Consecutive lanes read
// consecutive elements, so each slot is one coalesced access.
template <typename T, int N, typename TS>
__device__ __forceinline__ void load(rv<T, N>& dst, const TS* src) {
  const int lane = lane_id();
#pragma unroll
  for (int s = 0; s < N / WARP_THREADS; ++s)
    dst.data[s] = detail::convert<T>(src[s * WARP_THREADS + lane]);
}

template <typename T, int N, typename TS>
__device__ __forceinline__ void load(rv<T, N>& dst, const sv<TS, N>& src) {
  load(dst, src.data);
}

template <typename TD, typename T, int N>
__device__ __forceinline__ void store(TD* dst, const rv<T, N>& src) {
  const int lane = lane_id();
#pragma unroll
  for (int s = 0; s < N / WARP_THREADS; ++s)
    dst[s * WARP_THREADS + lane] = detail::convert<TD>(src.data[s]);
}

template <typename TD, typename T, int N>
__device__ __forceinline__ void store(sv<TD, N>& dst, const rv<T, N>& src) {
  store(dst.data, src);
}

// Sum of all N elements (fp32 accumulation), returned to every lane.
template <typename T, int N>
__device__ __forceinline__ float sum(const rv<T, N>& v) {
  float acc = 0.f;
#pragma unroll
  for (int s = 0; s < N / WARP_THREADS; ++s) acc += detail::convert<float>(v.data[s]);
  return warp_sum(acc);
}

// Sum of squares (RMSNorm statistics), returned to every lane.
template <typename T, int N>
__device__ __forceinline__ float sum_squares(const rv<T, N>& v) {
  float acc = 0.f;
#pragma unroll
  for (int s = 0; s < N / WARP_THREADS; ++s) {
    const float x = detail::convert<float>(v.data[s]);
    acc = fmaf(x, x, acc);
  }
  return warp_sum(acc);
}

}  // namespace mk::tk
