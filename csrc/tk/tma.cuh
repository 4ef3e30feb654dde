// tma.cuh: 1-D bulk copies through the TMA engine (global -> shared completing on an mbarrier), L2 cache
// policies and L2 prefetches.
//
// Rules (PTX ISA, cp.async.bulk): sizes are multiples of 16 bytes, both addresses 16-byte aligned.
#pragma once

#include "mbarrier.cuh"

namespace mk::tk {

enum class cache_hint { normal, evict_first, evict_last };

// 64-bit L2 policy for the .L2::cache_hint operand. evict_first for streamed-once weights,
// evict_last for activations/KV re-read soon; normal = evict_normal.
template <cache_hint H>
__device__ __forceinline__ uint64_t make_policy() {
  uint64_t p;
  if constexpr (H == cache_hint::evict_first) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  } else if constexpr (H == cache_hint::evict_last) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  }
  return p;
}

// dst_smem <- src_gmem (bytes), completing `bytes` transactions on `sem`. One thread issues it;
// the barrier must expect the bytes (arrive_expect_tx) in the same phase.
template <cache_hint H = cache_hint::normal>
__device__ __forceinline__ void bulk_load(void* dst_smem, const void* src_gmem, uint32_t bytes,
                                          semaphore& sem) {
  const uint64_t policy = make_policy<H>();
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst_smem)),
      "l"(src_gmem), "r"(bytes), "r"(smem_addr(&sem)), "l"(policy)
      : "memory");
}

// Warms L2 with [src, src+bytes) without touching shared memory.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src_gmem, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src_gmem), "r"(bytes)
               : "memory");
}

}  // namespace mk::tk
