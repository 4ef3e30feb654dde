// warpgroup.cuh: warp specialisation helpers: register reallocation between warpgroups
// (setmaxnreg) and named barriers (bar.sync / bar.arrive on ids 1..15; id 0 is __syncthreads).
#pragma once

#include "tk/util.cuh"

namespace mk::tk {

inline constexpr int WARPGROUP_WARPS = 4;
inline constexpr int WARPGROUP_THREADS = WARP_THREADS * WARPGROUP_WARPS;

__device__ __forceinline__ int warpgroup_id() { return threadIdx.x / WARPGROUP_THREADS; }

// setmaxnreg only takes effect when the kernel has a register cap at entry
// (__launch_bounds__(threads, 1) or -maxrregcount) and each warpgroup's role is one branch.
// All warps of the warpgroup must execute it (.sync.aligned).
template <int N>
__device__ __forceinline__ void increase_registers() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void decrease_registers() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// Blocks until THREADS threads (whole warps) have arrived at barrier `id`, this one included.
template <int THREADS>
__device__ __forceinline__ void named_sync(int id) {
  static_assert(THREADS > 0 && THREADS % WARP_THREADS == 0, "named barrier: whole warps");
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(THREADS) : "memory");
}

// Arrives at barrier `id` without waiting (producer side of a named-barrier hand-off).
template <int THREADS>
__device__ __forceinline__ void named_arrive(int id) {
  static_assert(THREADS > 0 && THREADS % WARP_THREADS == 0, "named barrier: whole warps");
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(THREADS) : "memory");
}

// Synchronises the 4 warps of the calling warpgroup (barrier id 1 + warpgroup index, so ids
// 1..NUM_WARPGROUPS are reserved by this helper).
__device__ __forceinline__ void warpgroup_sync() {
  named_sync<WARPGROUP_THREADS>(1 + warpgroup_id());
}

}  // namespace mk::tk
