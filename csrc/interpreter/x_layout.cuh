// x_layout.cuh: how an instruction's activation rows sit in shared x (fp32, or bf16 for the tensor cores) and the
// stores that put them there.
#pragma once

#include <cuda_fp16.h>

#include "dot_rows_mma.cuh"
#include "state.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

__device__ __forceinline__ bool aligned16(const void* p, long long n_floats) {
  return ((reinterpret_cast<uintptr_t>(p) & 15) | (n_floats & 3)) == 0;
}

// Whether an instruction's x goes to shared memory as bf16: exactly when its pages run on the tensor cores
// (consume_pages: K whole chunks; one row takes dot_rows_mma.cuh, several dot_tokens_mma.cuh), which round x
// to bf16 anyway. Written once by the loaders below, x then costs each page half the shared loads and no
// conversions. Several rows take the tensor cores only where the model's streams are bf16 (Globals::mma_x_rows: 1
// where they are fp8, whose several rows run on the CUDA cores, in fp32).
__device__ __forceinline__ bool x_is_bf16(const Globals& g, int nx, int K) {
  return nx <= g.mma_x_rows && g.mma_matvec && mma_row_ok(K);
}

// Whether x's one row is written as f16 instead of bf16: for an fp8 stream's tensor-core pages (dot_fp8.cuh), which
// multiply f16 (e4m3 widens to it exactly); w: the instruction's slot.
__device__ __forceinline__ bool x_is_f16(const Globals& g, int nx, int K, const int* w) {
  return nx == 1 && x_is_bf16(g, nx, K) && slot_scales(w) != nullptr;
}

// Elements from one x row to the next. Several bf16 rows are X_ROW_SKEW elements further apart than K: the
// tensor cores read 8 rows' same columns at once (ldmatrix), and rows 2K bytes apart would all fall in the
// same shared-memory banks (K is a multiple of 128).
__device__ __forceinline__ int x_pitch(int nx, int K, bool as_bf16) { return as_bf16 && nx > 1 ? K + X_ROW_SKEW : K; }

// Row i of x (of pitch `pitch` elements, bf16 when as_bf16), as the float* the stores below take.
__device__ __forceinline__ float* x_row(const Shared& sm, int i, int pitch, bool as_bf16) {
  return as_bf16 ? reinterpret_cast<float*>(reinterpret_cast<bf16*>(sm.x) + (long long)i * pitch)
                 : sm.x + (long long)i * pitch;
}

// v within f16's finite range: an fp8 stream's x (the norm's input times its weight) past 65504 saturates there
// instead of turning the products into inf and NaN.
__device__ __forceinline__ float f16_finite(float v) { return fminf(fmaxf(v, -65504.f), 65504.f); }

// dst (bf16 when as_bf16, f16 when also f16, else fp32) element k..k+3 = v.
__device__ __forceinline__ void store_x4(float* dst, int k, float4 v, bool as_bf16, bool f16 = false) {
  if (as_bf16 && f16) {
    const __half2 lo = __floats2half2_rn(f16_finite(v.x), f16_finite(v.y));
    const __half2 hi = __floats2half2_rn(f16_finite(v.z), f16_finite(v.w));
    *reinterpret_cast<uint2*>(reinterpret_cast<bf16*>(dst) + k) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  } else if (as_bf16) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    *reinterpret_cast<uint2*>(reinterpret_cast<bf16*>(dst) + k) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  } else {
    *reinterpret_cast<float4*>(dst + k) = v;
  }
}

// v scaled by four bf16 weights (w).
__device__ __forceinline__ float4 scale4(float4 v, uint2 w) {
  const float2 w01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
  const float2 w23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
  return make_float4(v.x * w01.x, v.y * w01.y, v.z * w23.x, v.w * w23.y);
}

// v scaled by four bf16 weights (w), with v's squares added to ss: four columns of an RMSNorm's input (the 1/rms
// factor comes later, in the epilogues: activations.cuh load_rows_rmsnorm).
__device__ __forceinline__ float4 scale4_sumsq(float4 v, uint2 w, float& ss) {
  ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
  return scale4(v, w);
}

__device__ __forceinline__ void store_x1(float* dst, int k, float v, bool as_bf16, bool f16 = false) {
  if (as_bf16 && f16) reinterpret_cast<__half*>(dst)[k] = __float2half_rn(f16_finite(v));
  else if (as_bf16) reinterpret_cast<bf16*>(dst)[k] = __float2bfloat16(v);
  else dst[k] = v;
}

}  // namespace mk::vm
