// st.cuh: shared tiles with the 128-byte XOR swizzle (TMA SWIZZLE_128B layout), and subtile views.
//
// Layout: the tile is split into column panels 128 bytes wide (64 bf16 / 32 fp32 columns). Panel
// p holds rows 0..R-1 as consecutive 128-byte lines. Inside a line the 16-byte chunk index is
// XOR-ed with (row % 8), which spreads an 8-row ldmatrix over all 32 banks and is exactly what
// TMA writes with CU_TENSOR_MAP_SWIZZLE_128B into a 1024-byte-aligned destination.
#pragma once

#include <concepts>

#include "tk/util.cuh"

namespace mk::tk {

// Byte offset of element (r, c) in a swizzled tile whose panels hold PANEL_ROWS rows each.
template <typename T, int PANEL_ROWS>
__host__ __device__ constexpr uint32_t swizzled_offset(int r, int c) {
  constexpr int PANEL_COLS = 128 / int(sizeof(T));
  const int panel = c / PANEL_COLS;
  const uint32_t in_line = uint32_t(c % PANEL_COLS) * sizeof(T);
  const uint32_t chunk = (in_line / 16) ^ uint32_t(r % 8);
  return uint32_t(panel) * PANEL_ROWS * 128 + uint32_t(r) * 128 + chunk * 16 + in_line % 16;
}

template <typename T, int R, int C>
struct alignas(1024) st {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "st: element must be 2 or 4 bytes");
  static_assert(R > 0 && R % 8 == 0, "st: rows must be a multiple of 8 (swizzle period)");
  static_assert(C > 0 && (C * int(sizeof(T))) % 128 == 0, "st: a row must be whole 128 B panels");
  using dtype = T;
  static constexpr int ROWS = R;
  static constexpr int COLS = C;
  static constexpr int PANEL_COLS = 128 / int(sizeof(T));
  static constexpr int PANELS = C / PANEL_COLS;
  static constexpr uint32_t PANEL_BYTES = uint32_t(R) * 128;
  static constexpr uint32_t BYTES = uint32_t(R) * C * sizeof(T);

  T data[R * C];

  __device__ __forceinline__ T* idx(int r, int c) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(data) + swizzled_offset<T, R>(r, c));
  }
  __device__ __forceinline__ const T* idx(int r, int c) const {
    return reinterpret_cast<const T*>(reinterpret_cast<const char*>(data) +
                                      swizzled_offset<T, R>(r, c));
  }
  __device__ __forceinline__ T& operator()(int r, int c) { return *idx(r, c); }
  __device__ __forceinline__ const T& operator()(int r, int c) const { return *idx(r, c); }
  // Start of column panel p (the TMA destination for a box of PANEL_COLS x R).
  __device__ __forceinline__ T* panel(int p) { return data + p * R * PANEL_COLS; }
};

// A rectangular window of a swizzled tile; addresses go through the parent's swizzle, so any
// window works for element access, and windows whose columns start at multiples of 8 also work
// for ldmatrix (an 8-element row segment is one unsplit 16-byte chunk).
template <typename T, int R, int C, int PANEL_ROWS>
struct st_view {
  static_assert(R > 0 && R % 8 == 0 && C > 0 && C % 8 == 0, "st_view: shape must be 8-aligned");
  using dtype = T;
  static constexpr int ROWS = R;
  static constexpr int COLS = C;
  T* base;
  int row0;
  int col0;

  __device__ __forceinline__ T* idx(int r, int c) const {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(base) +
                                swizzled_offset<T, PANEL_ROWS>(row0 + r, col0 + c));
  }
  __device__ __forceinline__ T& operator()(int r, int c) const { return *idx(r, c); }
};

// View of the (i, j)-th R2 x C2 block of `tile`.
template <int R2, int C2, typename T, int R, int C>
__device__ __forceinline__ st_view<T, R2, C2, R> subtile(st<T, R, C>& tile, int i, int j) {
  static_assert(R % R2 == 0 && C % C2 == 0, "subtile: must divide the parent tile");
  return st_view<T, R2, C2, R>{tile.data, i * R2, j * C2};
}

// Anything shaped like a shared tile: st itself or an st_view.
template <typename S>
concept shared_tile = requires(const S& s, int r, int c) {
  typename S::dtype;
  { S::ROWS } -> std::convertible_to<int>;
  { S::COLS } -> std::convertible_to<int>;
  { s.idx(r, c) };
};

template <int R, int C>
using st_bf = st<bf16, R, C>;
template <int R, int C>
using st_fl = st<float, R, C>;

}  // namespace mk::tk
