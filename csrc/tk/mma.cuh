// mma.cuh: the warp-level bf16 and f16 tensor-core products (mma.sync m16n8k16, fp32 accumulate) on raw fragments.
#pragma once

#include "util.cuh"

namespace mk::tk {

namespace detail {
// d += a * b on raw fragments (packed bf16 pairs in 32-bit registers), for callers that build their own
// fragments (the batch-1 page matvec: csrc/interpreter/dot_rows_mma.cuh). Not volatile: a pure register
// op, so the compiler may schedule it among the shared loads that feed it.
__device__ __forceinline__ void mma_16x8x16_acc(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same product of f16 fragments (the fp8 pages' path: e4m3 widens to f16 exactly, in one instruction).
__device__ __forceinline__ void mma_16x8x16_f16_acc(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace detail

}  // namespace mk::tk
