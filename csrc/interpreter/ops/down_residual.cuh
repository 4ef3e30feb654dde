// ops/down_residual.cuh: DOWN_RESIDUAL (engine/instructions/ops/down_residual.py), a row block of the MLP's
// down projection over one K-slice, added atomically into hidden.
#pragma once

#include "../code_size.cuh"

#include "../activations.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"

namespace mk::vm {

// DOWN_RESIDUAL: operands row_begin, row_end, k_begin, k_end, slice. hidden += act[:, k]·Wd[:, k]^T.
template <bool B1>
__device__ bool op_down(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), row_begin = w[3], rows = w[4] - w[3], k_begin = w[5], K = w[6] - w[5];
  return for_each_token_group<B1>(g, T, [=, &g, &sm](const TokenGroup& grp) {
    const int t0 = grp.base, n = grp.n;
    load_rows<B1>(g, sm, g.act, g.intermediate, k_begin, n, K, [&](int i) { return t0 + i; }, w);
    if (!streamed_matvec<B1>(g, sm, grp, w)) return false;
    MK_ROLLED
    for (int idx = threadIdx.x; idx < n * rows; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, rows);
      const int i = ti.x, r = ti.y;
      tk::atomic_add_f32(g.hidden + (long long)(t0 + i) * g.hidden_size + row_begin + r, sm.out[i * rows + r]);
    }
    return true;
  });
}

template <>
struct Op<OP_DOWN_RESIDUAL> : OpTraits {
  // W_down rows [row_begin, row_end) of the layer, columns [k_begin, k_end): strided rows.
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    return matrix_rows(g.w_down, g.w_down_scale, in.layer * in.H + in.a[0], in.a[1] - in.a[0], in.a[2],
                       in.a[3] - in.a[2], in.I);
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_down<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
