// ops/tp_argmax.cuh: TP_ARGMAX (engine/instructions/ops/tp_argmax.py), each sequence's greedy token when the ranks
// of a tensor-parallel group split the LM head's vocabulary (an argmax-only step: each rank's blocks cover its share,
// the shares ascending with the rank). The ranks exchange their best (logit, id) per sequence through Globals::tp_best,
// rows every rank has mapped over NVLink (engine/cuda/tp_peers.py), and all take the same winner.
#pragma once

#include "../code_size.cuh"

#include "../../tk/reduce.cuh"
#include "../op_traits.cuh"
#include "../state.cuh"
#include "argmax_reduce.cuh"
#include "tp_allreduce.cuh"

namespace mk::vm {

// TP_ARGMAX: operand num_blocks. For s < S: out_tokens[s] = the best over the ranks of each rank's best over its
// num_blocks LM-head blocks (ties: the smallest id), then what ARGMAX_REDUCE does with it (take_token).
//   1. per sequence (a warp each), this rank's best, as ARGMAX_REDUCE takes it; lane 0 stores it into row r (this
//      rank) of every rank's tp_best as two words tagged v (the logit's bits; the id), v = this rank's count of
//      TP_ARGMAX runs + 1 (flag (2 layers * tp_flag_chunks) * N + r of its own flags; only this rank reads it);
//   2. per sequence, lane 0 reads every rank's two words from its own tp_best until both carry the tag, keeps the best
//      in rank order with tk::beats (a later rank wins only with a larger value: its ids are larger) and takes it.
// The rows need no second slot: a rank writes its next step's words only after every rank has run this step's
// all-reduces of the next step, which each rank starts after its launch of this step (and this op) ended.
template <bool B1>
__device__ bool op_tp_argmax(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int S = B1 ? 1 : sa.num_seqs(), nb = w[3], N = g.tp_world, r = g.tp_rank;
  if (N <= 1) {  // one rank: its blocks are the whole vocabulary
    op_argmax(g, sm, w);
    return true;
  }
  if (S > g.tp_slot_tokens) {
    if (threadIdx.x == 0) tp_error(g, w, -1, g.tp_slot_tokens, S);
    return false;
  }
  int* const own_count = tp_mapped(g.tp_flags, r) + (2 * g.layers * g.tp_flag_chunks) * N + r;
  const unsigned tag = (unsigned)(__ldcg(own_count) + 1);  // read by all before thread 0 raises it (barrier below)
  const long long row = 2LL * g.tp_slot_tokens;            // one rank's words
  MK_ROLLED
  for (int s = tk::warp_id(); s < S; s += NUM_CONSUMER_WARPS) {
    const tk::value_index best = blocks_argmax(g, s, nb);
    if (tk::lane_id() == 0) {
      const unsigned long long hi = (unsigned long long)tag << 32;
      MK_ROLLED
      for (int q = 0; q < N; ++q) {
        unsigned long long* dst = tp_mapped(g.tp_best, q) + r * row + 2 * s;
        tp_store_word(dst, hi | __float_as_uint(best.value));
        tp_store_word(dst + 1, hi | (unsigned)best.index);
      }
    }
  }
  bool ok = true;
  MK_ROLLED
  for (int s = tk::warp_id(); s < S && ok; s += NUM_CONSUMER_WARPS) {
    if (tk::lane_id() != 0) continue;
    const unsigned long long* mine = tp_mapped(g.tp_best, r) + 2 * s;
    tk::value_index best{-INFINITY, 0x7fffffff};
    MK_ROLLED
    for (int q = 0; q < N && ok; ++q) {
      unsigned long long v = tp_load_word(mine + q * row), id = tp_load_word(mine + q * row + 1);
      if ((unsigned)(v >> 32) != tag) v = tp_wait_word(g, w, mine + q * row, tag, q);
      if ((unsigned)(id >> 32) != tag) id = tp_wait_word(g, w, mine + q * row + 1, tag, q);
      ok = (unsigned)(v >> 32) == tag && (unsigned)(id >> 32) == tag;
      const tk::value_index c{__uint_as_float((unsigned)v), (int)(unsigned)id};
      if (ok && tk::beats(c, best)) best = c;
    }
    if (ok) take_token(g, sm, s, best.index);
  }
  if (!consumer_all(ok)) return false;
  if (threadIdx.x == 0) *own_count = (int)tag;  // read by the next TP_ARGMAX, in a later launch
  take_tokens_done(g, sm, S);
  return true;
}

template <>
struct Op<OP_TP_ARGMAX> : OpTraits {
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_tp_argmax<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
