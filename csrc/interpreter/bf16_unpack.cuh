// bf16_unpack.cuh: eight packed bf16 weights (one 16-byte shared load) to fp32, for the page matvecs.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace mk::vm {

// bf16 is the top half of an fp32: the low element of a packed pair is `word << 16`, the high one
// `word & 0xffff0000` (one integer op per element; the intrinsic pair-conversion takes three per pair).
__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

}  // namespace mk::vm
