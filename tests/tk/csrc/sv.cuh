// sv.cuh: shared vectors (plain contiguous arrays, 16-byte aligned so bulk copies can target them).
#pragma once

#include "tk/util.cuh"

namespace mk::tk {

template <typename T, int N>
struct alignas(16) sv {
  static_assert(N > 0, "sv: length must be positive");
  static_assert((N * sizeof(T)) % 16 == 0, "sv: byte size must be a multiple of 16 (bulk copies)");
  using dtype = T;
  static constexpr int LENGTH = N;
  static constexpr uint32_t BYTES = uint32_t(N) * sizeof(T);
  T data[N];

  __device__ __forceinline__ T& operator[](int i) { return data[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return data[i]; }

  // The i-th length-M piece, itself an sv (alignment holds since M*sizeof(T) % 16 == 0).
  template <int M>
  __device__ __forceinline__ sv<T, M>& subvec(int i) {
    static_assert(N % M == 0, "subvec: must divide the vector");
    return *reinterpret_cast<sv<T, M>*>(data + i * M);
  }
};

}  // namespace mk::tk
