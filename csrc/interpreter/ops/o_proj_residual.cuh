// ops/o_proj_residual.cuh: O_PROJ_RESIDUAL (engine/instructions/ops/o_proj_residual.py), a row block of the
// attention output projection plus the residual.
#pragma once

#include "../code_size.cuh"

#include "../activations.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"

namespace mk::vm {

// O_PROJ_RESIDUAL: operands row_begin, row_end. mid = hidden + attn·Wo^T; hidden = mid.
template <bool B1>
__device__ bool op_o_proj(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), row_begin = w[3], rows = w[4] - w[3], Q = g.n_heads * g.head_dim;
  return for_each_token_group<B1>(g, T, [=, &g, &sm](const TokenGroup& grp) {
    const int t0 = grp.base, n = grp.n;
    // The residual is read before the matvec when one pass covers it (its latency hides behind the work).
    const bool preload = n * rows <= CONSUMER_THREADS;
    float resid = 0.f;
    if (preload && threadIdx.x < n * rows)
      resid = load_cg(g.hidden + (long long)(t0 + threadIdx.x / rows) * g.hidden_size + row_begin + threadIdx.x % rows);
    load_rows<B1>(g, sm, g.attn_out, Q, 0, n, Q, [&](int i) { return t0 + i; }, w);
    if (threadIdx.x == 0 && grp.pass.first) timing_mark(g, w, MARK_INPUT);
    if (!matvec<B1>(g, sm, grp, w)) return false;
    MK_ROLLED
    for (int idx = threadIdx.x; idx < n * rows; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, rows);
      const int i = ti.x, r = ti.y;
      const long long at = (long long)(t0 + i) * g.hidden_size + row_begin + r;
      const float m = (preload ? resid : load_cg(g.hidden + at)) + sm.out[i * rows + r];
      g.mid[at] = m;
      g.hidden[at] = m;
    }
    return true;
  });
}

template <>
struct Op<OP_O_PROJ_RESIDUAL> : OpTraits {
  static constexpr bool in_variant(int v) { return v != VARIANT_BATCH1_FUSED; }
  static constexpr bool CHAIN = true;
  // W_o rows [row_begin, row_end) of the layer.
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    return matrix_rows(g.w_o, g.w_o_scale, in.layer * in.H + in.a[0], in.a[1] - in.a[0], 0, (int)in.Q, in.Q);
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_o_proj<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
