// ops/argmax_reduce.cuh: ARGMAX_REDUCE (engine/instructions/ops/argmax_reduce.py), each sequence's greedy
// token from the LM-head blocks' maxima; in the on-device decode loop also the next step's inputs.
#pragma once

#include "../code_size.cuh"

#include "../../tk/reduce.cuh"
#include "../advance.cuh"
#include "../run_stop.cuh"
#include "../bf16_unpack.cuh"
#include "../op_traits.cuh"
#include "../state.cuh"

namespace mk::vm {

// The next step's hidden rows from the ids in shared `out` ([S] ints): hidden[s] = embed[id s] (fp32; decode:
// sequence s is token s of the next step). Every consumer thread takes 8 columns (one 16-byte load), so a batch-1
// row is one round trip; the host folds the embedding only where hidden_size % 8 == 0.
__device__ __forceinline__ void write_next_embeddings(const Globals& g, const Shared& sm, int S) {
  const int H = g.hidden_size, chunks = H / 8;
  const int* ids = reinterpret_cast<const int*>(sm.out);
  MK_ROLLED
  for (int idx = threadIdx.x; idx < S * chunks; idx += CONSUMER_THREADS) {
    const int s = idx / chunks, c = idx % chunks;
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(g.embed + (long long)ids[s] * H) + c);  // read-only weights
    float f[8];
    bf16x8_to_float(v, f);
    float4* dst = reinterpret_cast<float4*>(g.hidden + (long long)s * H) + 2 * c;
    dst[0] = make_float4(f[0], f[1], f[2], f[3]);
    dst[1] = make_float4(f[4], f[5], f[6], f[7]);
  }
}

// Sequence s's best over the LM-head blocks (every lane of the calling warp receives it; ties: smallest id).
__device__ __forceinline__ tk::value_index blocks_argmax(const Globals& g, int s, int nb) {
  tk::value_index best{-INFINITY, 0x7fffffff};
  for (int b = tk::lane_id(); b < nb; b += 32) {
    const tk::value_index c{load_cg(g.lm_max + s * g.lm_blocks + b), __ldcg(g.lm_arg + s * g.lm_blocks + b)};
    if (tk::beats(c, best)) best = c;
  }
  return tk::warp_argmax(best);
}

// One thread per sequence s: its greedy token `id` into out_tokens and, in the on-device decode loop, into the next
// step's inputs: every reader of step_args in this step is an ancestor. In a run with device stop checks, the id is
// checked too, so the run's launches after its last row stopped do no work.
__device__ __forceinline__ void take_token(const Globals& g, const Shared& sm, int s, int id) {
  g.out_tokens[s] = id;
  if (g.advance_history) {
    advance_sequence(const_cast<int*>(g.step_args), s, id, g.advance_history, g.error);
    if (g.run_stop) note_run_token(g.run_stop, s, id, g.run_step);
  }
  reinterpret_cast<int*>(sm.out)[s] = id;  // for the embedding rows below (S <= tokens <= OUT_FLOATS)
}

// After every sequence's take_token: their embedding rows, where the next step has no EMBED: every reader of
// hidden in this step (the LM head's norm) is an ancestor too.
__device__ __forceinline__ void take_tokens_done(const Globals& g, const Shared& sm, int S) {
  if (g.advance_history && g.embed_next) {
    consumer_sync();
    write_next_embeddings(g, sm, S);
  }
}

// ARGMAX_REDUCE: operand num_blocks. out_tokens[s] = argmax over the LM-head blocks (ties: smallest id).
__device__ void op_argmax(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int S = sa.num_seqs(), nb = w[3];
  for (int s = tk::warp_id(); s < S; s += NUM_CONSUMER_WARPS) {
    const tk::value_index best = blocks_argmax(g, s, nb);
    if (tk::lane_id() == 0) take_token(g, sm, s, best.index);
  }
  take_tokens_done(g, sm, S);
}

template <>
struct Op<OP_ARGMAX_REDUCE> : OpTraits {
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    op_argmax(g, sm, w);
    return true;
  }
};

}  // namespace mk::vm
