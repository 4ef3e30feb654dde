// ops/rms_gate_up_silu.cuh: RMS_GATE_UP_SILU (engine/instructions/ops/rms_gate_up_silu.py), the MLP norm and
// a block of its gate/up projection, SiLU(gate) * up.
#pragma once

#include "../code_size.cuh"

#include "../activations.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"

namespace mk::vm {

// RMS_GATE_UP_SILU: operands i_begin, i_end, slice. act = silu(gate) * up over tile-interleaved rows.
template <bool B1>
__device__ bool op_gate_up(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), layer = w[W_LAYER], i_begin = w[3], n = w[4] - w[3];
  const int tile = g.gu_tile, rows = 2 * n;
  return for_each_token_group<B1>(g, T, [=, &g, &sm](const TokenGroup& grp) {
    const int t0 = grp.base, nt = grp.n;
    load_rows_rmsnorm<B1>(g, sm, g.mid, nt, g.mlp_norm + (long long)layer * g.hidden_size,
                          [&](int i) { return t0 + i; }, w);
    if (!streamed_matvec<B1>(g, sm, grp, w)) return false;
    MK_ROLLED
    for (int idx = threadIdx.x; idx < nt * n; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, n);
      const int i = ti.x, li = ti.y;  // li: index relative to i_begin (a multiple of tile)
      const int gate_row = 2 * (li / tile) * tile + li % tile;
      const float inv = rms_inv(g, sm, i);  // the norm's scale, deferred to here (activations.cuh)
      const float gate = sm.out[i * rows + gate_row] * inv, up = sm.out[i * rows + gate_row + tile] * inv;
      g.act[(long long)(t0 + i) * g.intermediate + i_begin + li] = gate / (1.f + expf(-gate)) * up;
    }
    return true;
  });
}

template <>
struct Op<OP_RMS_GATE_UP_SILU> : OpTraits {
  // The tile-interleaved W_gate_up rows of intermediate [i_begin, i_end) of the layer (2 per element).
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    return matrix_rows(g.w_gate_up, g.w_gate_up_scale, in.layer * 2 * in.I + 2LL * in.a[0], 2 * (in.a[1] - in.a[0]),
                       0, (int)in.H, in.H);
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_gate_up<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
