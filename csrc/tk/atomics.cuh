// atomics.cuh: cross-SM signalling through global counters with release/acquire ordering, the same pair
// at block scope on shared memory, and fp32 global atomic adds.
//
// Protocol (producer SM):  write data -> signal_add(counter, 1)
//           (consumer SM):  spin until load_acquire(counter) >= n -> read data.
// The release on `red` and the acquire on `ld` make the producer's writes visible to the consumer
// without a separate __threadfence().
#pragma once

#include "util.cuh"

namespace mk::tk {

// counter += v, release at GPU scope (no return value: compiles to RED).
__device__ __forceinline__ void signal_add(int* counter, int v = 1) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(counter), "r"(v) : "memory");
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The same pair at block scope on shared memory: a flag one warp publishes and other warps of the
// block poll (the interpreter's weight ring, csrc/interpreter/state.cuh wait_page_issued).
__device__ __forceinline__ void store_release_shared(uint32_t* p, uint32_t v) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;" ::"r"(smem_addr(p)), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_shared(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(smem_addr(p)) : "memory");
  return v;
}

// *p += v in fp32 (RED when the result is unused). Order of additions is unspecified, so sums
// are not bit-reproducible across runs.
__device__ __forceinline__ void atomic_add_f32(float* p, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

// Four consecutive floats (p 16-byte aligned) in one vector RED (sm_90).
__device__ __forceinline__ void atomic_add_f32x4(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
}

}  // namespace mk::tk
