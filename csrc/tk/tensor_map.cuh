// tensor_map.cuh: 2-D tiled TMA. Host: encode a CUtensorMap with cuTensorMapEncodeTiled fetched
// at run time through cudaGetDriverEntryPointByVersion (no -lcuda: CI machines have no driver
// library). Device: box loads into shared memory, completing on an mbarrier.
//
// Pass maps to kernels as `const __grid_constant__ CUtensorMap` parameters, or keep an array of
// them in global memory (64-byte aligned, written before the launch) and pass its pointer.
#pragma once

#include <cuda.h>  // CUtensorMap and enums only: types, no driver symbols are linked
#include <cudaTypedefs.h>

#include "mbarrier.cuh"
#include "tma.cuh"

namespace mk::tk {

// ---- host side -------------------------------------------------------------------------------

template <typename T>
constexpr CUtensorMapDataType tensor_map_dtype() {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "tensor map: bf16 or fp32 elements");
  if constexpr (sizeof(T) == 2) {
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  } else {
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
}

// Looked up once per process (the lookup goes through the driver; a launch encodes a map every step).
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry_point() {
  static const PFN_cuTensorMapEncodeTiled_v12000 cached = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    MK_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                   cudaEnableDefault, &status));
    if (status != cudaDriverEntryPointSuccess || fn == nullptr) {
      throw std::runtime_error("cuTensorMapEncodeTiled not found in the CUDA driver (need >= 12.0)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return cached;
}

// Map of a row-major [rows, cols] matrix with row stride `ld` elements, read in boxes of
// box_rows x box_cols. Checks TMA's constraints and names the violated one.
template <typename T>
CUtensorMap make_tensor_map_2d(const T* ptr, uint64_t rows, uint64_t cols, uint64_t ld,
                               uint32_t box_rows, uint32_t box_cols,
                               CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  const uint64_t row_bytes = ld * sizeof(T);
  MK_REQUIRE(ptr != nullptr, "tensor map: null global pointer");
  MK_REQUIRE(reinterpret_cast<uintptr_t>(ptr) % 16 == 0, "tensor map: pointer not 16-byte aligned");
  MK_REQUIRE(rows > 0 && cols > 0 && ld >= cols, "tensor map: bad shape or row stride");
  MK_REQUIRE(row_bytes % 16 == 0, "tensor map: row stride must be a multiple of 16 bytes");
  MK_REQUIRE(box_rows >= 1 && box_rows <= 256 && box_cols >= 1 && box_cols <= 256,
             "tensor map: box dims must be 1..256");
  MK_REQUIRE((box_cols * sizeof(T)) % 16 == 0, "tensor map: box row must be a multiple of 16 B");
  MK_REQUIRE(swizzle != CU_TENSOR_MAP_SWIZZLE_128B || box_cols * sizeof(T) <= 128,
             "tensor map: 128B swizzle needs box rows of at most 128 bytes");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult res = encode_tiled_entry_point()(
      &map, tensor_map_dtype<T>(), 2, const_cast<T*>(ptr), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    throw std::runtime_error("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(res));
  }
  return map;
}

// ---- device side (one thread issues) ---------------------------------------------------------

// Box at element coordinates (row, col) -> dst_smem, completing on sem.
template <cache_hint H = cache_hint::normal>
__device__ __forceinline__ void tensor_load_2d(void* dst_smem, const CUtensorMap* map, int row,
                                               int col, semaphore& sem) {
  const uint64_t policy = make_policy<H>();
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_addr(dst_smem)),
      "l"(map), "r"(col), "r"(row), "r"(smem_addr(&sem)), "l"(policy)
      : "memory");
}

}  // namespace mk::tk
