// tma.cuh: 1-D bulk copies through the TMA engine (global -> shared completing on an mbarrier,
// shared -> global store / store-add in bulk groups), L2 cache policies, group waits.
//
// Rules (PTX ISA, cp.async.bulk): sizes are multiples of 16 bytes, both addresses 16-byte aligned.
// Bulk reduce: .add.f32 is supported for a global destination; bf16 needs the .noftz form.
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
