// reduce.cuh: the warp-wide argmax with xor-shuffles (torch.argmax's tie and NaN rules); every lane receives
// the result.
#pragma once

#include "util.cuh"

namespace mk::tk {

struct value_index {
  float value;
  int index;
};

// Larger value wins; ties go to the smaller index (torch.argmax returns the first maximum).
// NaN is treated as the largest value, as torch.argmax does.
__device__ __forceinline__ bool beats(value_index a, value_index b) {
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan || b_nan) return a_nan && (!b_nan || a.index < b.index);
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ __forceinline__ value_index warp_argmax(value_index v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    value_index o{__shfl_xor_sync(FULL_MASK, v.value, off), __shfl_xor_sync(FULL_MASK, v.index, off)};
    if (beats(o, v)) v = o;
  }
  return v;
}

}  // namespace mk::tk
