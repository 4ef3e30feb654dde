// bulk_stores.cuh: shared -> global bulk copies through the TMA engine (store / store-add in bulk groups),
// their group waits, and the proxy fence that orders generic shared-memory writes before them.
//
// Rules (PTX ISA, cp.async.bulk): sizes are multiples of 16 bytes, both addresses 16-byte aligned.
// Bulk reduce: .add.f32 is supported for a global destination; bf16 needs the .noftz form.
#pragma once

#include "tk/tma.cuh"

namespace mk::tk {

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA store,
// bulk copy) reads of them. Each writing thread fences, then the group synchronises.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// dst_gmem <- src_smem (bytes), tracked by the issuing thread's bulk group (bulk_commit/wait).
// Writers of src_smem must fence_proxy_async_shared() + synchronise before this is issued.
template <cache_hint H = cache_hint::normal>
__device__ __forceinline__ void bulk_store(void* dst_gmem, const void* src_smem, uint32_t bytes) {
  const uint64_t policy = make_policy<H>();
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::
                   "l"(dst_gmem),
               "r"(smem_addr(src_smem)), "r"(bytes), "l"(policy)
               : "memory");
}

// dst_gmem[i] += src_smem[i] element-wise (fp32), performed by the L2 atomically per element.
__device__ __forceinline__ void bulk_store_add(float* dst_gmem, const float* src_smem,
                                               uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   dst_gmem),
               "r"(smem_addr(src_smem)), "r"(bytes)
               : "memory");
}

// bf16 variant (no flush-to-zero of denormals, the only form PTX offers for bf16 add).
__device__ __forceinline__ void bulk_store_add(bf16* dst_gmem, const bf16* src_smem,
                                               uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;" ::"l"(
          dst_gmem),
      "r"(smem_addr(src_smem)), "r"(bytes)
      : "memory");
}

// Closes the current bulk group of this thread (stores/reduces issued since the last commit).
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N committed groups are pending: their writes are complete (visible).
template <int N = 0>
__device__ __forceinline__ void bulk_wait() {
  static_assert(N >= 0 && N <= 63, "bulk_wait: N out of range");
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// Weaker: waits only until the sources of those groups have been read (smem reusable).
template <int N = 0>
__device__ __forceinline__ void bulk_wait_read() {
  static_assert(N >= 0 && N <= 63, "bulk_wait_read: N out of range");
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

}  // namespace mk::tk
