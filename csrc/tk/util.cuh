// util.cuh: error-check macros (host), thread/warp ids, timers and sleep helpers (device).
// Everything in csrc/tk lives in namespace mk::tk and is header-only.
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mk::tk {

using bf16 = __nv_bfloat16;
using bf16_2 = __nv_bfloat162;

inline constexpr int WARP_THREADS = 32;
inline constexpr int WARPGROUP_WARPS = 4;
inline constexpr int WARPGROUP_THREADS = WARP_THREADS * WARPGROUP_WARPS;
inline constexpr unsigned FULL_MASK = 0xffffffffu;

// ---- host side -------------------------------------------------------------------------------

// Throws std::runtime_error naming the failing call and its location; pybind11 turns it into a
// Python RuntimeError, so a bad launch is an exception rather than a silent wrong answer.
inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                           cudaGetErrorString(err) + ") in `" + what + "` at " + file + ":" +
                           std::to_string(line));
}

#define MK_CUDA_CHECK(expr)                                                   \
  do {                                                                        \
    cudaError_t mk_err_ = (expr);                                             \
    if (mk_err_ != cudaSuccess) {                                             \
      ::mk::tk::throw_cuda_error(mk_err_, #expr, __FILE__, __LINE__);         \
    }                                                                         \
  } while (0)

// Checks the launch itself (bad config) and then, synchronously, the kernel's execution.
#define MK_CUDA_CHECK_LAUNCH_SYNC()                  \
  do {                                                \
    MK_CUDA_CHECK(cudaGetLastError());                \
    MK_CUDA_CHECK(cudaDeviceSynchronize());           \
  } while (0)

#define MK_REQUIRE(cond, msg)                                                         \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      throw std::invalid_argument(std::string("requirement failed: ") + #cond + ": " + \
                                  (msg));                                             \
    }                                                                                 \
  } while (0)

// ---- device side -----------------------------------------------------------------------------

__device__ __forceinline__ int lane_id() { return threadIdx.x & (WARP_THREADS - 1); }
__device__ __forceinline__ int warp_id() { return threadIdx.x / WARP_THREADS; }
__device__ __forceinline__ int warpgroup_id() { return threadIdx.x / WARPGROUP_THREADS; }
__device__ __forceinline__ int warp_in_group() { return warp_id() % WARPGROUP_WARPS; }

// Nanoseconds since an arbitrary epoch, the same clock on every SM (coarse-grained ticks).
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The SM this thread runs on (for timing records; not stable across launches).
__device__ __forceinline__ uint32_t smid() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ void nanosleep(uint32_t ns) { __nanosleep(ns); }

// Exponential back-off for spin loops: start short (latency), cap the sleep (fairness).
struct backoff {
  uint32_t ns = 8;
  static constexpr uint32_t MAX_NS = 256;
  __device__ __forceinline__ void pause() {
    __nanosleep(ns);
    ns = ns < MAX_NS ? ns * 2 : MAX_NS;
  }
};

// Shared-memory pointer to the 32-bit address PTX shared-state-space instructions take.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace mk::tk
