// activations.cuh: consumer-cooperative loads of an instruction's input rows into shared x, with
// the RMSNorm recomputed per instruction (cheaper than another dependency: DESIGN §4).
#pragma once

#include "state.cuh"

namespace mk::vm {

// x[i][k] = src[row(i) * src_stride + col0 + k] for k < K (rows produced by other SMs: L2 loads).
template <typename RowOf>
__device__ __forceinline__ void load_rows(const Shared& sm, const float* src, long long src_stride, int col0,
                                          int nx, int K, RowOf row_of) {
  const int tid = threadIdx.x;
  for (int i = 0; i < nx; ++i) {
    const float* s = src + (long long)row_of(i) * src_stride + col0;
    for (int k = tid; k < K; k += CONSUMER_THREADS) sm.x[i * K + k] = load_cg(s + k);
  }
  consumer_sync();
}

// x[i][k] = w[k] * src_row(i)[k] * rsqrt(mean(src_row(i)^2) + eps), fp32, like the reference model.
template <typename RowOf>
__device__ __forceinline__ void load_rows_rmsnorm(const Globals& g, const Shared& sm, const float* src, int nx,
                                                  const bf16* weight, RowOf row_of) {
  const int tid = threadIdx.x, H = g.hidden_size;
  for (int i = 0; i < nx; ++i) {
    const float* s = src + (long long)row_of(i) * H;
    float ss = 0.f;
    for (int k = tid; k < H; k += CONSUMER_THREADS) {
      const float v = load_cg(s + k);
      sm.x[i * H + k] = v;
      ss = fmaf(v, v, ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(tk::FULL_MASK, ss, o);
    if (tk::lane_id() == 0) sm.scratch[i * NUM_CONSUMER_WARPS + tk::warp_id()] = ss;
  }
  consumer_sync();
  for (int i = 0; i < nx; ++i) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < NUM_CONSUMER_WARPS; ++w) total += sm.scratch[i * NUM_CONSUMER_WARPS + w];
    const float inv = 1.0f / sqrtf(total / (float)H + g.eps);
    for (int k = tid; k < H; k += CONSUMER_THREADS)
      sm.x[i * H + k] = sm.x[i * H + k] * inv * __bfloat162float(weight[k]);
  }
  consumer_sync();
}

}  // namespace mk::vm
