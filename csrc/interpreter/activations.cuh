// activations.cuh: consumer-cooperative loads of an instruction's input rows into shared x, with
// the RMSNorm recomputed per instruction (cheaper than another dependency: DESIGN §4).
//
// These loads sit on the critical path of every layer (they run right after a dependency wait, while
// HBM is saturated by other SMs' weight streams, so each round trip costs ~1-2 µs). Each thread
// therefore issues LOADS_IN_FLIGHT 16-byte loads before it uses any of them; rows that are not
// 16-byte aligned take the scalar path.
#pragma once

#include "code_size.cuh"

#include "rows_in_flight.cuh"
#include "state.cuh"
#include "x_layout.cuh"

namespace mk::vm {

inline constexpr int LOADS_IN_FLIGHT = 4;

// dst[k] = src[k] for k < n (src written by other SMs in this launch: L2 loads); dst in bf16 when as_bf16 (f16 when
// also f16).
__device__ __forceinline__ void copy_to_shared(float* dst, const float* src, int n, bool as_bf16, bool f16) {
  const int tid = threadIdx.x;
  if (!aligned16(src, n) || !aligned16(dst, n)) {
    MK_ROLLED
    for (int k = tid; k < n; k += CONSUMER_THREADS) store_x1(dst, k, load_cg(src + k), as_bf16, f16);
    return;
  }
  const float4* s4 = reinterpret_cast<const float4*>(src);
  const int n4 = n / 4;
  MK_ROLLED
  for (int base = tid; base < n4; base += LOADS_IN_FLIGHT * CONSUMER_THREADS) {
    float4 v[LOADS_IN_FLIGHT];
#pragma unroll
    for (int u = 0; u < LOADS_IN_FLIGHT; ++u) {
      const int i = base + u * CONSUMER_THREADS;
      if (i < n4) v[u] = __ldcg(s4 + i);
    }
#pragma unroll
    for (int u = 0; u < LOADS_IN_FLIGHT; ++u) {
      const int i = base + u * CONSUMER_THREADS;
      if (i < n4) store_x4(dst, 4 * i, v[u], as_bf16, f16);
    }
  }
}

// x[i][k] = src[row(i) * src_stride + col0 + k] for k < K (bf16 when x_is_bf16, f16 when x_is_f16 for the
// instruction's slot w). B1: the batch-1 kernel variants (one row: the rows-in-flight path is not compiled in).
template <bool B1, typename RowOf>
__device__ __forceinline__ void load_rows(const Globals& g, const Shared& sm, const float* src, long long src_stride,
                                          int col0, int nx, int K, RowOf row_of, const int* w) {
  const bool as_bf16 = x_is_bf16(g, nx, K), f16 = x_is_f16(g, nx, K, w);
  const int pitch = x_pitch(nx, K, as_bf16);
  if constexpr (!B1) {
    if (nx > 1 && rows_in_flight_ok(src + col0, src_stride, K)) {
      copy_rows_in_flight(sm, src + col0, src_stride, nx, K, row_of, as_bf16, pitch);
      consumer_sync();
      return;
    }
  }
  for (int i = 0; i < nx; ++i)
    copy_to_shared(x_row(sm, i, pitch, as_bf16), src + (long long)row_of(i) * src_stride + col0, K, as_bf16, f16);
  consumer_sync();
}

// Sum of squares of src[0..n) while storing src[k] * w[k] into dst (both loads in flight together; dst in
// bf16 when as_bf16, f16 when also f16).
__device__ __forceinline__ float copy_scaled_sumsq(float* dst, const float* src, const bf16* w, int n, bool as_bf16,
                                                   bool f16) {
  const int tid = threadIdx.x;
  float ss = 0.f;
  if (!aligned16(src, n) || !aligned16(dst, n) || (reinterpret_cast<uintptr_t>(w) & 7)) {
    MK_ROLLED
    for (int k = tid; k < n; k += CONSUMER_THREADS) {
      const float v = load_cg(src + k);
      store_x1(dst, k, v * __bfloat162float(w[k]), as_bf16, f16);
      ss = fmaf(v, v, ss);
    }
    return ss;
  }
  const float4* s4 = reinterpret_cast<const float4*>(src);
  const uint2* w4 = reinterpret_cast<const uint2*>(w);  // four bf16
  const int n4 = n / 4;
  MK_ROLLED
  for (int base = tid; base < n4; base += LOADS_IN_FLIGHT * CONSUMER_THREADS) {
    float4 v[LOADS_IN_FLIGHT];
    uint2 wv[LOADS_IN_FLIGHT];
#pragma unroll
    for (int u = 0; u < LOADS_IN_FLIGHT; ++u) {
      const int i = base + u * CONSUMER_THREADS;
      if (i < n4) {
        v[u] = __ldcg(s4 + i);
        wv[u] = w4[i];
      }
    }
#pragma unroll
    for (int u = 0; u < LOADS_IN_FLIGHT; ++u) {
      const int i = base + u * CONSUMER_THREADS;
      if (i < n4) {
        store_x4(dst, 4 * i, scale4_sumsq(v[u], wv[u], ss), as_bf16, f16);
      }
    }
  }
  return ss;
}

// x[i][k] = w[k] * src_row(i)[k] (fp32), and row i's sum of squares left in shared scratch for rms_inv.
// The 1/rms factor is not applied here: every consumer of x is linear in it, so the epilogue scales each
// output instead (rms_inv), which saves a pass over x and a consumer barrier on every layer's critical path.
// Scratch rows stay untouched until the epilogue (nothing else in an instruction uses scratch).
static_assert(MAX_TOKEN_GROUP * NUM_CONSUMER_WARPS <= SCRATCH_FLOATS - 2,
              "per-warp sums of squares must fit scratch below the launch's abort flag (interpreter.cu)");
template <bool B1, typename RowOf>
__device__ __forceinline__ void load_rows_rmsnorm(const Globals& g, const Shared& sm, const float* src, int nx,
                                                  const bf16* weight, RowOf row_of, const int* w) {
  const int H = g.hidden_size;
  const bool as_bf16 = x_is_bf16(g, nx, H), f16 = x_is_f16(g, nx, H, w);
  const int pitch = x_pitch(nx, H, as_bf16);
  if constexpr (!B1) {
    if (nx > 1 && rows_in_flight_ok(src, H, H) && !(reinterpret_cast<uintptr_t>(weight) & 7)) {
      copy_scaled_rows_in_flight(sm, src, nx, H, weight, row_of, as_bf16, pitch);
      consumer_sync();
      return;
    }
  }
  for (int i = 0; i < nx; ++i) {
    float ss = copy_scaled_sumsq(x_row(sm, i, pitch, as_bf16), src + (long long)row_of(i) * H, weight, H, as_bf16,
                                 f16);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(tk::FULL_MASK, ss, o);
    if (tk::lane_id() == 0) sm.scratch[i * NUM_CONSUMER_WARPS + tk::warp_id()] = ss;
  }
  consumer_sync();
}

// 1 / rms of activation row i loaded by load_rows_rmsnorm: rsqrt(mean(src_row(i)^2) + eps), like the reference.
__device__ __forceinline__ float rms_inv(const Globals& g, const Shared& sm, int i) {
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < NUM_CONSUMER_WARPS; ++w) total += sm.scratch[i * NUM_CONSUMER_WARPS + w];
  return 1.0f / sqrtf(total / (float)g.hidden_size + g.eps);
}

}  // namespace mk::vm
