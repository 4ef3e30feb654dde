// dot_fp8.cuh: the page matvecs of fp8 (e4m3) weight rows (weight_stream.cuh WeightStream::scale): the bytes are
// widened in registers and each output is multiplied by its row's scale as it is written, so the ops' epilogues
// see the same values as for bf16 rows. A 16 KB page holds twice the rows of a bf16 one: at batch 1, where the
// weight bytes are the step's time, that is the point of fp8.
//
// Widening on the tensor cores' path: e4m3 is a subset of f16, one cvt widens a pair exactly, and the product runs
// as f16 x f16 with fp32 sums (x is written to shared memory as f16 for it: activations.cuh x_is_f16). The
// conversions bound an op's last page, which one warp computes on the op's critical path: the 1B's took 2.2 µs
// against a bf16 page's 0.85-1.2 µs (H200 profile). Measured and not kept (docs/PERFORMANCE.md, FP8 weights):
// bit-level widening to bf16 with a multiply (its last pages 3 µs), half the rows widened by integer ops beside the
// cvt, pages half full, an op's last page spread over the warps a row each (bf16 slower too).
// The CUDA cores' path widens to fp32: the byte's bits moved into an fp32's sign and low exponent/mantissa bits are
// the number times 2^-120, restored by one multiply (exact, subnormals and zero included).
//
// The batch-1 tensor-core mapping (dot_rows_mma_fp8): lane l loads 16 consecutive bytes of a weight row, k =
// 16 l .. 16 l + 15 of a 512-element block, and the same 16 elements of x; product c of the block takes k 4c..4c+3.
// Lane l = 4 g + q supplies A[g][2q, 2q+1, 2q+8, 2q+9] (row 0 of the pair; row 1 at g + 8) and B[2q, 2q+1, 2q+8,
// 2q+9][g] from those four k, so A's row g and B's column g are the same k (a permutation the sum does not see):
// D[g][g] and D[g + 8][g] are the two rows' partial dot products; the other entries are discarded (as in
// dot_rows_mma.cuh, one activation column uses 1/8 of a product).
#pragma once

#include "../tk/mma.cuh"
#include "../tk/shared_vec.cuh"
#include "../tk/util.cuh"
#include "code_size.cuh"
#include "config.cuh"

namespace mk::vm {

inline constexpr int FP8_LANE_ELEMS = 16;                         // bytes of a row one lane loads per block
inline constexpr int FP8_BLOCK_ELEMS = 32 * FP8_LANE_ELEMS;       // row elements one warp covers per block
inline constexpr uint32_t FP32_TWO_POW_120 = 0x7B800000u;         // 2^120

// Four e4m3 bytes as two f16 pairs, exactly: bytes 0, 1 in `lo`, 2, 3 in `hi` (the lower byte the lower half).
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, b;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// The four bytes of w as floats (f[0] from the lowest byte).
__device__ __forceinline__ void e4m3x4_to_float(uint32_t w, float (&f)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t b = (w >> (8 * i)) & 0xFFu;
    f[i] = __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7Fu) << 20)) * __uint_as_float(FP32_TWO_POW_120);
  }
}

// out[out_row0 + r] = scale[r] * W[first + r] . x for r < nrows (<= ROWS): fp8 rows of one page against one
// f16 x row, on the tensor cores (scale: the scales of these rows). Lanes past K load zeros, so any K of whole vectors
// works. ROWS = 1 leaves the pair's second row zero instead of widening a copy of the first.
template <int ROWS>
__device__ __forceinline__ void dot_rows_mma_fp8(uint32_t page_addr, int row_bytes, int first, int nrows, int K,
                                                 uint32_t x_addr, float* out, int out_row0, const float* scale) {
  static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4, "one row, or one or two pairs");
  constexpr int PAIRS = (ROWS + 1) / 2;
  const int lane = tk::lane_id();
  uint32_t row_addr[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)  // a missing row repeats a real one (discarded)
    row_addr[r] = page_addr + (uint32_t)((first + min(r, nrows - 1)) * row_bytes + lane * FP8_LANE_ELEMS);
  const uint32_t x_lane = x_addr + (uint32_t)(lane * FP8_LANE_ELEMS * 2);
  float acc[PAIRS][2][4];  // two accumulators per pair (products c even / odd) halve the dependent mma chain
#pragma unroll
  for (int p = 0; p < PAIRS; ++p)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[p][h][i] = 0.f;
  MK_ROLLED
  for (int kb = 0; kb < K; kb += FP8_BLOCK_ELEMS) {
    const bool in = kb + lane * FP8_LANE_ELEMS < K;
    uint4 w[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = tk::load_shared_u4_if(row_addr[r] + kb, in);
    const uint4 x0 = tk::load_shared_u4_if(x_lane + 2 * kb, in), x1 = tk::load_shared_u4_if(x_lane + 2 * kb + 16, in);
    const uint32_t xh[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int p = 0; p < PAIRS; ++p) {
      const uint4 second = w[ROWS > 1 ? 2 * p + 1 : 0];
      const uint32_t w0[4] = {w[2 * p].x, w[2 * p].y, w[2 * p].z, w[2 * p].w};
      const uint32_t w1[4] = {second.x, second.y, second.z, second.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        uint32_t a[4] = {0u, 0u, 0u, 0u};
        e4m3x4_to_f16x2(w0[c], a[0], a[2]);
        if constexpr (ROWS > 1) e4m3x4_to_f16x2(w1[c], a[1], a[3]);
        tk::detail::mma_16x8x16_f16_acc(acc[p][c & 1], a, xh[2 * c], xh[2 * c + 1]);
      }
    }
  }
  // Lane l holds D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1] (g = l / 4, t = l % 4): the diagonal
  // D[g][g] is entry 0 (g even) or 1 (g odd) of the lanes with t = g / 2; D[g + 8][g] entry 2 or 3 of the same.
  const int g = lane >> 2, t = lane & 3;
  const bool diag = t == (g >> 1), odd = g & 1;
  float v[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int p = r / 2, e = 2 * (r % 2);
    const float e0 = acc[p][0][e] + acc[p][1][e], e1 = acc[p][0][e + 1] + acc[p][1][e + 1];
    v[r] = diag ? (odd ? e1 : e0) : 0.f;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) v[r] += __shfl_xor_sync(tk::FULL_MASK, v[r], o);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      if (r < nrows) out[out_row0 + r] = v[r] * scale[r];
  }
}

// The `rows` fp8 rows of one page against one f16 x row, 4 rows per call where the page has them, else 2, 1 (8
// rows per call made the kernel spill). scale: the page's rows' scales. Not inlined: the batch-1 kernels' page loop
// it sits beside stays as compact as it was for bf16 pages (their speed follows their code size: code_size.cuh).
__device__ __noinline__ void dot_page_mma_fp8(uint32_t page_addr, int row_bytes, int rows, int K, uint32_t x_addr,
                                                 float* out, int out_row0, const float* scale) {
  if (rows == 1) return dot_rows_mma_fp8<1>(page_addr, row_bytes, 0, 1, K, x_addr, out, out_row0, scale);
  int r = 0;
  MK_ROLLED
  for (; r + 4 <= rows; r += 4)
    dot_rows_mma_fp8<4>(page_addr, row_bytes, r, 4, K, x_addr, out, out_row0 + r, scale + r);
  MK_ROLLED
  for (; r < rows; r += 2)
    dot_rows_mma_fp8<2>(page_addr, row_bytes, r, min(2, rows - r), K, x_addr, out, out_row0 + r, scale + r);
}

// x[t][k .. k + 16) of fp32 x rows of `pitch` floats.
__device__ __forceinline__ void load_x16(float (&f)[16], uint32_t x_addr, int pitch, int t, int k, bool in) {
  const uint32_t a = x_addr + (uint32_t)(t * pitch + k) * 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = tk::load_shared_f4_if(a + 16 * i, in);
    f[4 * i] = v.x;
    f[4 * i + 1] = v.y;
    f[4 * i + 2] = v.z;
    f[4 * i + 3] = v.w;
  }
}

inline constexpr int FP8_CORE_ROWS = 2;  // rows per call of the CUDA-core path

// out[t * out_stride + out_row0 + r] = scale[r] * W[first + r] . x[t] for r < nrows (<= FP8_CORE_ROWS), t < nx
// (<= NX; scale: these rows' scales): fp8 rows on the CUDA cores, for every case the tensor-core path above does not
// take (several x rows, in fp32: x_layout.cuh x_is_bf16; rows it cannot take). The weights are widened once per
// k-step and used for every x row. (Inlined: as a call from the page loops the general kernel spilled twice as much.)
template <int NX>
__device__ __forceinline__ void dot_rows_fp8_cores(uint32_t page_addr, int row_bytes, int first, int nrows, int K,
                                                   uint32_t x_addr, int nx, float* out, int out_row0, int out_stride,
                                                   const float* scale) {
  constexpr int R = FP8_CORE_ROWS;
  const int lane = tk::lane_id();
  float acc[R][NX];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NX; ++t) acc[r][t] = 0.f;
  MK_ROLLED
  for (int kb = 0; kb < K; kb += FP8_BLOCK_ELEMS) {
    const int k = kb + lane * FP8_LANE_ELEMS;
    const bool in = k < K;
    float wf[R][16];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 raw = tk::load_shared_u4_if(page_addr + (uint32_t)((first + r) * row_bytes + k), in && r < nrows);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float f[4];
        e4m3x4_to_float(words[i], f);
#pragma unroll
        for (int j = 0; j < 4; ++j) wf[r][4 * i + j] = f[j];
      }
    }
#pragma unroll
    for (int t = 0; t < NX; ++t) {
      if (t < nx) {
        float xf[16];
        load_x16(xf, x_addr, K, t, k, in);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int i = 0; i < 16; ++i) acc[r][t] = fmaf(wf[r][i], xf[i], acc[r][t]);
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NX; ++t) acc[r][t] += __shfl_xor_sync(tk::FULL_MASK, acc[r][t], o);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NX; ++t)
        if (r < nrows && t < nx) out[t * out_stride + out_row0 + r] = acc[r][t] * scale[r];
  }
}

// The `rows` fp8 rows of one page against nx (<= NX) fp32 x rows on the CUDA cores (scale: the page's rows' scales).
template <int NX>
__device__ __forceinline__ void dot_page_fp8_cores(uint32_t page_addr, int row_bytes, int rows, int K, uint32_t x_addr,
                                                   int nx, float* out, int out_row0, int out_stride,
                                                   const float* scale) {
  MK_ROLLED
  for (int r = 0; r < rows; r += FP8_CORE_ROWS)
    dot_rows_fp8_cores<NX>(page_addr, row_bytes, r, min(FP8_CORE_ROWS, rows - r), K, x_addr, nx, out, out_row0 + r,
                           out_stride, scale + r);
}

}  // namespace mk::vm
