// ops/lm_head.cuh: LM_HEAD (engine/instructions/ops/lm_head.py), a vocabulary block of the final norm + LM
// head for each sequence's last token, with the block's argmax.
#pragma once

#include "../code_size.cuh"

#include "../../tk/reduce.cuh"
#include "../activations.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"

namespace mk::vm {

// lm_head_direct's epilogue: the block's raw products of the S sequences, written to the global logits by the page
// loop, scaled by each sequence's norm in place, and each sequence's block argmax (a warp per sequence).
__device__ __forceinline__ void finish_direct_lm_block(const Globals& g, const Shared& sm, int S, int v_begin, int rows,
                                                       int block) {
  const int warp = tk::warp_id(), lane = tk::lane_id();
  for (int i = warp; i < S; i += NUM_CONSUMER_WARPS) {
    const float inv = rms_inv(g, sm, i);
    float* row = g.logits + (long long)i * g.vocab + v_begin;
    tk::value_index best{-INFINITY, 0x7fffffff};
    for (int r = lane; r < rows; r += 32) {
      const float v = __ldcg(row + r) * inv;  // as stored in logits
      row[r] = v;
      const tk::value_index c{v, v_begin + r};
      if (tk::beats(c, best)) best = c;
    }
    best = tk::warp_argmax(best);
    if (lane == 0) {
      g.lm_max[i * g.lm_blocks + block] = best.value;
      g.lm_arg[i * g.lm_blocks + block] = best.index;
    }
  }
}

// Whether this LM head writes its products straight into the global logits (KernelOptions.lm_head_direct): its
// sequences are one token group on the tensor cores, so the host cut its blocks without the out buffer's cap (one
// per SM instead of out_floats / sequences rows each: every block reloads the sequences' x and pays an epilogue).
__device__ __forceinline__ bool lm_head_direct(const Globals& g, int S) {
  return g.lm_head_direct && S >= 2 && S <= g.token_group && x_is_bf16(g, S, g.hidden_size);
}

// LM_HEAD: operands v_begin, v_end, block. Logits of each sequence's last token + block argmax.
template <bool B1>
__device__ bool op_lm_head(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int S = B1 ? 1 : sa.num_seqs(), v_begin = w[3], rows = w[4] - w[3], block = w[5];
  if constexpr (!B1) {
    if (lm_head_direct(g, S)) {
      load_rows_rmsnorm<B1>(g, sm, g.hidden, S, g.final_norm, [&](int i) { return sa.live_end(i) - 1; }, w);
      if (threadIdx.x == 0) {
        timing_mark(g, w, MARK_INPUT);
        set_low_cap_from(sm, NO_LOW_CAP);
      }
      float* raw = g.logits + v_begin;  // products unscaled, then scaled in place by finish_direct_lm_block
      if (!consume_pages<MAX_TOKENS_PER_MATVEC, PagePath::TOKENS_MMA>(g, sm, S, w, ONLY_PASS, raw,
                                                                        g.vocab))
        return false;
      __threadfence_block();  // every warp's products, before another warp reads them back
      consumer_sync();
      finish_direct_lm_block(g, sm, S, v_begin, rows, block);
      return true;
    }
  }
  // More sequences than one matvec takes: groups of them over the same pages (token_groups.cuh).
  return for_each_token_group<B1>(g, S, [=, &g, &sm](const TokenGroup& grp) {
    const int s0 = grp.base, n = grp.n;
    load_rows_rmsnorm<B1>(g, sm, g.hidden, n, g.final_norm, [&](int i) { return sa.live_end(s0 + i) - 1; },
                          w);
    if (!streamed_matvec<B1>(g, sm, grp, w)) return false;
    MK_ROLLED
    for (int idx = threadIdx.x; idx < n * rows; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, rows);
      const int i = ti.x, r = ti.y;
      g.logits[(long long)(s0 + i) * g.vocab + v_begin + r] = sm.out[i * rows + r] * rms_inv(g, sm, i);
    }
    const int warp = tk::warp_id(), lane = tk::lane_id();
    for (int i = warp; i < n; i += NUM_CONSUMER_WARPS) {
      const float inv = rms_inv(g, sm, i);
      tk::value_index best{-INFINITY, 0x7fffffff};
      for (int r = lane; r < rows; r += 32) {
        const tk::value_index c{sm.out[i * rows + r] * inv, v_begin + r};  // as stored in logits
        if (tk::beats(c, best)) best = c;
      }
      best = tk::warp_argmax(best);
      if (lane == 0) {
        g.lm_max[(s0 + i) * g.lm_blocks + block] = best.value;
        g.lm_arg[(s0 + i) * g.lm_blocks + block] = best.index;
      }
    }
    return true;
  });
}

template <>
struct Op<OP_LM_HEAD> : OpTraits {
  // LM-head rows [v_begin, v_end).
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    return matrix_rows(g.lm_head, g.lm_head_scale, in.a[0], in.a[1] - in.a[0], 0, (int)in.H, in.H);
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_lm_head<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
