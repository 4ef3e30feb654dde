// common.cuh: host helpers shared by the mk_tk_tests binding files (pointer casts, a device
// status word for in-kernel failures, launch checking, the module's registration hooks), and every header the
// tests exercise: the interpreter's primitives (csrc/tk) and the ones only these tests use (beside them here).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "tk/atomics.cuh"
#include "tk/grid_dependency.cuh"
#include "tk/mbarrier.cuh"
#include "tk/mma.cuh"
#include "tk/reduce.cuh"
#include "tk/shared_vec.cuh"
#include "tk/tensor_map.cuh"
#include "tk/tma.cuh"
#include "tk/util.cuh"

#include "alloc.cuh"
#include "bounded_waits.cuh"
#include "bulk_stores.cuh"
#include "load_store.cuh"
#include "matvec.cuh"
#include "mma_tiles.cuh"
#include "rt.cuh"
#include "rt_ops.cuh"
#include "rv.cuh"
#include "st.cuh"
#include "sv.cuh"
#include "tile_tma.cuh"
#include "warp_reduce.cuh"
#include "warpgroup.cuh"

// Checks the launch itself (bad config) and then, synchronously, the kernel's execution.
#define MK_CUDA_CHECK_LAUNCH_SYNC()         \
  do {                                      \
    MK_CUDA_CHECK(cudaGetLastError());      \
    MK_CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)

namespace mk::tk_tests {

// Python passes tensor.data_ptr() as an int.
template <typename T>
T* as_ptr(std::uintptr_t p) {
  MK_REQUIRE(p != 0, "null data pointer");
  return reinterpret_cast<T*>(p);
}

// One int in device memory that kernels set to a non-zero code when a bounded wait times out.
class device_status {
 public:
  device_status() {
    MK_CUDA_CHECK(cudaMalloc(&ptr_, sizeof(int)));
    MK_CUDA_CHECK(cudaMemset(ptr_, 0, sizeof(int)));
  }
  ~device_status() { cudaFree(ptr_); }
  device_status(const device_status&) = delete;
  device_status& operator=(const device_status&) = delete;
  int* get() const { return ptr_; }
  // Throws naming `what` if any kernel reported a failure.
  void check(const char* what) const {
    int code = 0;
    MK_CUDA_CHECK(cudaMemcpy(&code, ptr_, sizeof(int), cudaMemcpyDeviceToHost));
    if (code != 0) {
      throw std::runtime_error(std::string(what) + ": kernel reported failure code " +
                               std::to_string(code));
    }
  }

 private:
  int* ptr_ = nullptr;
};

template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, int bytes) {
  MK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

void register_sync(pybind11::module_& m);
void register_tma(pybind11::module_& m);
void register_tiles(pybind11::module_& m);
void register_math(pybind11::module_& m);

}  // namespace mk::tk_tests
