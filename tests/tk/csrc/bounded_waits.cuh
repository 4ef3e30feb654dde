// bounded_waits.cuh: waits that report a timeout instead of hanging (a watchdog), on an mbarrier phase and on
// a global counter, plus the mbarrier's non-blocking probe and invalidation. The interpreter has waits of its
// own that also record where it was stuck (csrc/interpreter/state.cuh); these serve the tests of csrc/tk.
#pragma once

#include "tk/atomics.cuh"
#include "tk/mbarrier.cuh"

namespace mk::tk {

// Default watchdog for waits: far above any legitimate wait, far below "the test suite hangs".
inline constexpr uint64_t DEFAULT_WAIT_TIMEOUT_NS = 2'000'000'000ull;

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

__device__ __forceinline__ void invalidate_semaphore(semaphore& sem) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(&sem)) : "memory");
}

// Waits for the phase with `parity` to complete. Returns false (never hangs) once timeout_ns
// of %globaltimer time has passed; the caller reports the stuck wait.
__device__ __forceinline__ bool wait(semaphore& sem, uint32_t parity,
                                     uint64_t timeout_ns = DEFAULT_WAIT_TIMEOUT_NS) {
  if (try_wait(sem, parity)) return true;
  const uint64_t start = globaltimer();
  while (!try_wait(sem, parity)) {
    if (globaltimer() - start > timeout_ns) return false;
  }
  return true;
}

// Exponential back-off for spin loops: start short (latency), cap the sleep (fairness).
struct backoff {
  uint32_t ns = 8;
  static constexpr uint32_t MAX_NS = 256;
  __device__ __forceinline__ void pause() {
    __nanosleep(ns);
    ns = ns < MAX_NS ? ns * 2 : MAX_NS;
  }
};

// Spins (with back-off sleeps) until *counter >= target. Returns false once timeout_ns of
// %globaltimer time has passed, so the caller can record the stuck wait and bail out.
__device__ __forceinline__ bool wait_counter_geq(const int* counter, int target,
                                                 uint64_t timeout_ns = DEFAULT_WAIT_TIMEOUT_NS) {
  if (load_acquire(counter) >= target) return true;
  const uint64_t start = globaltimer();
  backoff b;
  while (load_acquire(counter) < target) {
    if (globaltimer() - start > timeout_ns) return false;
    b.pause();
  }
  return true;
}

}  // namespace mk::tk
