// tile_tma.cuh: 2-D tiled TMA on whole swizzled shared tiles (st.cuh): one box per 128-byte panel in
// (load_tile), box stores and store-adds out (store_tile, store_add_tile), and the map for such a tile.
#pragma once

#include "bulk_stores.cuh"
#include "st.cuh"
#include "tk/tensor_map.cuh"

namespace mk::tk {

// ---- host side -------------------------------------------------------------------------------

// Map whose box is one 128-byte-wide panel of the swizzled shared tile ST (see load_tile).
template <typename ST>
CUtensorMap make_tile_map(const typename ST::dtype* ptr, uint64_t rows, uint64_t cols,
                          uint64_t ld) {
  return make_tensor_map_2d(ptr, rows, cols, ld, ST::ROWS, ST::PANEL_COLS,
                            CU_TENSOR_MAP_SWIZZLE_128B);
}

// ---- device side (one thread issues) ---------------------------------------------------------

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Box of src_smem -> global at (row, col), in this thread's bulk group.
__device__ __forceinline__ void tensor_store_2d(const CUtensorMap* map, int row, int col,
                                                const void* src_smem) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];" ::
                   "l"(map),
               "r"(col), "r"(row), "r"(smem_addr(src_smem))
               : "memory");
}

// global(row.., col..) += box of src_smem, element-wise in the map's dtype.
__device__ __forceinline__ void tensor_store_add_2d(const CUtensorMap* map, int row, int col,
                                                    const void* src_smem) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%1, %2}], [%3];" ::"l"(map),
      "r"(col), "r"(row), "r"(smem_addr(src_smem))
      : "memory");
}

// Whole swizzled tile at element (row, col): one box per 128-byte panel. The caller arms sem
// with ST::BYTES (arrive_expect_tx) in the same phase; map comes from make_tile_map<ST>.
template <cache_hint H = cache_hint::normal, typename T, int R, int C>
__device__ __forceinline__ void load_tile(st<T, R, C>& dst, const CUtensorMap* map, int row,
                                          int col, semaphore& sem) {
#pragma unroll
  for (int p = 0; p < st<T, R, C>::PANELS; ++p)
    tensor_load_2d<H>(dst.panel(p), map, row, col + p * st<T, R, C>::PANEL_COLS, sem);
}

// Whole swizzled tile -> global at element (row, col) (store) or += (store_add). Writers of dst
// must fence_proxy_async_shared() and synchronise first; then bulk_commit() + bulk_wait().
template <typename T, int R, int C>
__device__ __forceinline__ void store_tile(const CUtensorMap* map, int row, int col,
                                           st<T, R, C>& src) {
#pragma unroll
  for (int p = 0; p < st<T, R, C>::PANELS; ++p)
    tensor_store_2d(map, row, col + p * st<T, R, C>::PANEL_COLS, src.panel(p));
}

template <typename T, int R, int C>
__device__ __forceinline__ void store_add_tile(const CUtensorMap* map, int row, int col,
                                               st<T, R, C>& src) {
#pragma unroll
  for (int p = 0; p < st<T, R, C>::PANELS; ++p)
    tensor_store_add_2d(map, row, col + p * st<T, R, C>::PANEL_COLS, src.panel(p));
}

}  // namespace mk::tk
