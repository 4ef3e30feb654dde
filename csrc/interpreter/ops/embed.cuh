// ops/embed.cuh: EMBED (engine/instructions/ops/embed.py), the step's input rows from the embedding table.
#pragma once

#include "../op_traits.cuh"
#include "../state.cuh"

namespace mk::vm {

// EMBED: operands tok_begin, tok_end. hidden[t] = embed[token_ids[t]] (fp32).
__device__ void op_embed(const Globals& g, const int* w) {
  const StepArgs sa(g);
  const int H = g.hidden_size, t0 = w[3], n = w[4] - w[3];
  for (int idx = threadIdx.x; idx < n * H; idx += CONSUMER_THREADS) {
    const int t = t0 + idx / H, k = idx % H;
    g.hidden[(long long)t * H + k] = __bfloat162float(g.embed[(long long)sa.token_id(t) * H + k]);
  }
}

template <>
struct Op<OP_EMBED> : OpTraits {
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared&, const int* w) {
    op_embed(g, w);
    return true;
  }
};

}  // namespace mk::vm
