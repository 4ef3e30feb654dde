// mbarrier.cuh: shared-memory mbarrier "semaphores" for intra-SM pipelines (TMA completion,
// producer/consumer hand-off): initialisation, arrivals and the potentially-blocking probe the interpreter's
// bounded waits spin on (csrc/interpreter/state.cuh).
#pragma once

#include "util.cuh"

namespace mk::tk {

// One 8-byte mbarrier in shared memory. Phases alternate parity 0,1,0,... ; a waiter names the
// parity of the phase it waits to see completed (start with 0).
struct alignas(8) semaphore {
  uint64_t word;
};

// One thread initialises; then fence_semaphore_init() + a block barrier before anyone uses it.
__device__ __forceinline__ void init_semaphore(semaphore& sem, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&sem)), "r"(arrivals)
               : "memory");
}

// Ends a barrier's life (no arrival or copy pending on it) before its memory is used for anything else or
// initialised again.
__device__ __forceinline__ void inval_semaphore(semaphore& sem) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(&sem)) : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA complete_tx) and other threads.
__device__ __forceinline__ void fence_semaphore_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
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

}  // namespace mk::tk
