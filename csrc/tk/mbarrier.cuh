// mbarrier.cuh: shared-memory mbarrier "semaphores" for intra-SM pipelines (TMA completion,
// producer/consumer hand-off), with bounded waits that report a timeout instead of hanging.
#pragma once

#include "util.cuh"

namespace mk::tk {

// One 8-byte mbarrier in shared memory. Phases alternate parity 0,1,0,... ; a waiter names the
// parity of the phase it waits to see completed (start with 0).
struct alignas(8) semaphore {
  uint64_t word;
};

// Default watchdog for waits: far above any legitimate wait, far below "the test suite hangs".
inline constexpr uint64_t DEFAULT_WAIT_TIMEOUT_NS = 2'000'000'000ull;

// One thread initialises; then fence_semaphore_init() + a block barrier before anyone uses it.
__device__ __forceinline__ void init_semaphore(semaphore& sem, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&sem)), "r"(arrivals)
               : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA complete_tx) and other threads.
__device__ __forceinline__ void fence_semaphore_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void invalidate_semaphore(semaphore& sem) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(&sem)) : "memory");
}

// Counts `count` arrivals (release semantics: this thread's prior writes are visible to waiters).
__device__ __forceinline__ void arrive(semaphore& sem, uint32_t count = 1) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&sem)),
               "r"(count)
               : "memory");
}

// One arrival plus `bytes` more transaction bytes expected (the TMA copies will complete them).
__device__ __forceinline__ void arrive_expect_tx(semaphore& sem, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(
                   smem_addr(&sem)),
               "r"(bytes)
               : "memory");
}

// Raises the expected transaction count without arriving.
__device__ __forceinline__ void expect_tx(semaphore& sem, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&sem)),
               "r"(bytes)
               : "memory");
}

// Non-blocking probe: has the phase with this parity completed?
__device__ __forceinline__ bool test_wait(semaphore& sem, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_addr(&sem)), "r"(parity)
      : "memory");
  return done != 0;
}

// Potentially-blocking probe (the hardware suspends the thread for a while before giving up).
__device__ __forceinline__ bool try_wait(semaphore& sem, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_addr(&sem)), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits for the phase with `parity` to complete. Returns false (never hangs) once timeout_ns
// of %globaltimer time has passed; the caller reports the stuck wait (watchdog).
__device__ __forceinline__ bool wait(semaphore& sem, uint32_t parity,
                                     uint64_t timeout_ns = DEFAULT_WAIT_TIMEOUT_NS) {
  if (try_wait(sem, parity)) return true;
  const uint64_t start = globaltimer();
  while (!try_wait(sem, parity)) {
    if (globaltimer() - start > timeout_ns) return false;
  }
  return true;
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA store,
// bulk copy) reads of them. Each writing thread fences, then the group synchronises.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Same for global memory: generic writes/acquires vs. TMA loads of the same global data.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Per-slot phase bits for rings of semaphores (bit i = parity to wait for on slot i).
struct phase_bits {
  uint32_t bits = 0;
  __device__ __forceinline__ uint32_t get(int slot) const { return (bits >> slot) & 1u; }
  __device__ __forceinline__ void flip(int slot) { bits ^= 1u << slot; }
};

}  // namespace mk::tk
