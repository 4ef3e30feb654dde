// registers.cuh: moving registers between the warpgroups of a block (setmaxnreg, sm_90a).
//
// A block's registers are allocated at launch for its largest thread; a warpgroup that needs few (a producer issuing
// copies) gives some back to the block's pool and one that needs many (consumers holding accumulators) takes them.
// Every warp of a warpgroup executes the same call; a taking call waits until the pool has the registers.
#pragma once

namespace mk::tk {

template <int N>
__device__ __forceinline__ void warpgroup_take_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void warpgroup_give_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

}  // namespace mk::tk
