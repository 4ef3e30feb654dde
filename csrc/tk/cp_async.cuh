// cp_async.cuh: 16-byte asynchronous copies from global to shared memory (cp.async, sm_80+), with zero fill.
//
// Why: a loop that streams tiles into shared memory and computes on the previous one needs its loads in flight
// while the math runs, without holding them in registers; cp.async writes shared memory directly and is waited
// for in groups. The cg form caches in L2 only, so it reads data other SMs wrote during the same kernel (after
// the reader's acquire), as ld.global.cg does.
#pragma once

#include "util.cuh"

namespace mk::tk {

// 16 bytes from `src` (global, 16-byte aligned) to shared address `dst`; where !valid, 16 zero bytes (src is
// not read, but must still be a valid address).
__device__ __forceinline__ void cp_async_16_or_zero(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Closes the group of copies this thread issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most `PENDING` of this thread's most recent groups are still in flight (a barrier must follow
// before other threads read what this thread copied).
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

}  // namespace mk::tk
