// ops/attn_partial.cuh: ATTN_PARTIAL (engine/instructions/ops/attn_partial.py), split-KV decode/prefill
// attention of some query heads of one KV group: keys from the page ring on one-token steps (attention_ring.cuh),
// else from global memory: a prompt chunk's many queries on the tensor cores (attention_tiles.cuh), a few on the
// CUDA cores (attention_global.cuh).
#pragma once

#include "../attention_global.cuh"
#include "../attention_ring.cuh"
#include "../attention_tiles.cuh"
#include "../op_traits.cuh"
#include "../query_units.cuh"
#include "../state.cuh"

namespace mk::vm {

// Where ATTN_PARTIAL's outputs go: attn_out (and its bf16 copy, O's tiles' input) with one split, else this split's
// o_part / lse_part rows.
__device__ __forceinline__ auto partial_output(const Globals& g, const int* w) {
  const int grp = w[4], split = w[5], nsplit = w[6], hd = g.head_dim, qcols = g.n_heads * hd;
  const int T = StepArgs(g).num_tokens(), head0 = grp * (g.n_heads / g.n_kv) + w[7];
  return [=, &g](int t, int h, int d, float out, float lse) {
    const int head = head0 + h;
    if (nsplit == 1) {
      g.attn_out[(long long)t * qcols + head * hd + d] = out;
      g.attn_bf16[(long long)t * qcols + head * hd + d] = __float2bfloat16(out);
    } else {
      g.o_part[((long long)split * T + t) * qcols + head * hd + d] = out;
      if (d == 0) g.lse_part[((long long)split * T + t) * g.n_heads + head] = lse;
    }
  };
}

// ATTN_PARTIAL: operands seq, kv_group, split, num_splits, head_begin, head_end (heads within the group), q_part,
// q_parts (which part of the sequence's new tokens), spread (resolved by the controller: query_units.cuh).
// One new token whose earlier keys the controller put on the page ring (kv_stream.cuh) takes the ring
// path; anything else (prefill chunks, the knob off) reads its keys from global memory.
template <int DPL, bool B1>
__device__ bool attn_partial(const Globals& g, const Shared& sm, const int* w) {
  if (w[W_ATTN_SEQ] < 0) return true;  // a spread unit past the step's work (query_units.cuh resolved the others)
  if (w[W_SLOT_KV_MODE]) return attend_ring<DPL>(g, sm, w, partial_output(g, w));
  if constexpr (B1) {
    return variant_mismatch(g, w);
  } else {
    const AttnTask task{w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10]};
    if constexpr (DPL == 2 || DPL == 4) {  // head_dim 64, 128: many queries on the tensor cores
      if (takes_tiles(g, sm, task, 32 * DPL)) {
        attend_tiles<DPL>(g, sm, w, task, partial_output(g, w));
        return true;
      }
    }
    attend<DPL, true>(g, sm, w, task, partial_output(g, w));
    return true;
  }
}

template <bool B1>
__device__ __forceinline__ bool op_attn_partial(const Globals& g, const Shared& sm, const int* w) {
  if (g.head_dim == 64) return attn_partial<2, B1>(g, sm, w);
  if (g.head_dim == 128) return attn_partial<4, B1>(g, sm, w);
  if constexpr (!B1) {  // the batch-1 variants hold head dims up to 128: a fourth path spilled their registers
    if (g.head_dim == 256) return attn_partial<8, B1>(g, sm, w);
  }
  return attn_partial<1, B1>(g, sm, w);  // head_dim 32 (the host stores others in one of these: head_padding.py)
}

template <>
struct Op<OP_ATTN_PARTIAL> : OpTraits {
  static constexpr bool in_variant(int v) { return v != VARIANT_BATCH1_FUSED; }
  static constexpr bool CHAIN = true;
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_attn_partial<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
