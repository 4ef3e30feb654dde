// util.cuh: error-check macros (host), thread/warp ids, timers and shared-window addresses (device).
// Everything in csrc/tk lives in namespace mk::tk and is header-only; csrc/tk holds what the interpreter
// uses (more primitives, tested but unused by it, live beside their tests in tests/tk/csrc).
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

// Shared-memory pointer to the 32-bit address PTX shared-state-space instructions take.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace mk::tk
