// warp_reduce.cuh: warp-wide sum and max with xor-shuffles; every lane receives the result.
#pragma once

#include "tk/util.cuh"

namespace mk::tk {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(FULL_MASK, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
  return v;
}

}  // namespace mk::tk
