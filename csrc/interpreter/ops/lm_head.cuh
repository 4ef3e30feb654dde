// ops/lm_head.cuh: LM_HEAD (engine/instructions/ops/lm_head.py), a vocabulary block of the final norm + LM
// head for each sequence's last token, with the block's argmax.
#pragma once

#include "../code_size.cuh"

#include "../../tk/reduce.cuh"
#include "../activations.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"

namespace mk::vm {

// LM_HEAD: operands v_begin, v_end, block. Logits of each sequence's last token + block argmax.
template <bool B1>
__device__ bool op_lm_head(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int S = B1 ? 1 : sa.num_seqs(), v_begin = w[3], rows = w[4] - w[3], block = w[5];
  load_rows_rmsnorm<B1>(g, sm, g.hidden, S, g.final_norm, [&](int s) { return sa.query_start(s + 1) - 1; });
  streamed_input_ready(g, sm, w);
  if (!matvec<B1>(g, sm, S, w)) return false;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < S * rows; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, rows);
    const int s = ti.x, r = ti.y;
    g.logits[(long long)s * g.vocab + v_begin + r] = sm.out[s * rows + r] * rms_inv(g, sm, s);
  }
  const int warp = tk::warp_id(), lane = tk::lane_id();
  for (int s = warp; s < S; s += NUM_CONSUMER_WARPS) {
    const float inv = rms_inv(g, sm, s);
    tk::value_index best{-INFINITY, 0x7fffffff};
    for (int r = lane; r < rows; r += 32) {
      const tk::value_index c{sm.out[s * rows + r] * inv, v_begin + r};  // as stored in logits
      if (tk::beats(c, best)) best = c;
    }
    best = tk::warp_argmax(best);
    if (lane == 0) {
      g.lm_max[s * g.lm_blocks + block] = best.value;
      g.lm_arg[s * g.lm_blocks + block] = best.index;
    }
  }
  return true;
}

template <>
struct Op<OP_LM_HEAD> : OpTraits {
  // LM-head rows [v_begin, v_end).
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    WeightStream s;
    s.base = g.lm_head + (long long)in.a[0] * in.H;
    s.rows = in.a[1] - in.a[0];
    s.row_elems = (int)in.H;
    s.row_stride = in.H;
    return s;
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_lm_head<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
