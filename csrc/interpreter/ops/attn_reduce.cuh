// ops/attn_reduce.cuh: ATTN_REDUCE (engine/instructions/ops/attn_reduce.py), the log-sum-exp merge of a
// (sequence, KV group)'s attention splits (ops/attn_partial.cuh) into attn_out and attn_bf16.
#pragma once

#include "../code_size.cuh"

#include "../op_traits.cuh"
#include "../state.cuh"

namespace mk::vm {

// ATTN_REDUCE: operands seq, kv_group, num_splits. out = Σ_k e^{lse_k - M} o_k / Σ_k e^{lse_k - M}.
__device__ void op_attn_reduce(const Globals& g, const int* w) {
  const StepArgs sa(g);
  const int s = w[3], grp = w[4], nsplit = w[5], hd = g.head_dim, G = g.n_heads / g.n_kv;
  const int T = sa.num_tokens(), qcols = g.n_heads * hd, q0 = sa.query_start(s), nq = sa.live_end(s) - q0;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < nq * G * hd; idx += CONSUMER_THREADS) {
    const int t = q0 + idx / (G * hd), h = (idx / hd) % G, d = idx % hd, head = grp * G + h;
    float M = -INFINITY;
    for (int k = 0; k < nsplit; ++k) M = fmaxf(M, load_cg(g.lse_part + ((long long)k * T + t) * g.n_heads + head));
    float num = 0.f, den = 0.f;
    for (int k = 0; k < nsplit; ++k) {
      const float f = expf(load_cg(g.lse_part + ((long long)k * T + t) * g.n_heads + head) - M);
      den += f;
      num = fmaf(f, load_cg(g.o_part + ((long long)k * T + t) * qcols + head * hd + d), num);
    }
    const float out = num / den;
    g.attn_out[(long long)t * qcols + head * hd + d] = out;
    g.attn_bf16[(long long)t * qcols + head * hd + d] = __float2bfloat16(out);  // O's tiles' input
  }
}

template <>
struct Op<OP_ATTN_REDUCE> : OpTraits {
  static constexpr bool in_variant(int v) { return v != VARIANT_BATCH1_FUSED; }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared&, const int* w) {
    op_attn_reduce(g, w);
    return true;
  }
};

}  // namespace mk::vm
