// ops/dispatch.cuh: where the kernel dispatches on the opcode. Every opcode of opcodes.cuh has its header
// below; the switches are generated from MK_OPCODES, one case per opcode, from each opcode's Op<OP_NAME>
// (op_traits.cuh). An opcode is added with its header, its include here and its line in MK_OPCODES
// (docs/ADDING_AN_OPCODE.md). Beyond these switches only the helpers shared by the two attention opcodes
// name them (kv_stream.cuh, attention_ring.cuh, panel_pages.cuh; TILE_MATMUL's loader side: tile_matmul.cuh), and the queue's end is NOOP's (ops/noop.cuh).
#pragma once

#include "../op_traits.cuh"
#include "../state.cuh"

#include "argmax_reduce.cuh"
#include "attn_o_proj.cuh"
#include "attn_partial.cuh"
#include "attn_reduce.cuh"
#include "down_residual.cuh"
#include "embed.cuh"
#include "lm_head.cuh"
#include "noop.cuh"
#include "o_proj_residual.cuh"
#include "rms_gate_up_silu.cuh"
#include "rms_qkv_rope_append.cuh"
#include "tile_matmul.cuh"
#include "tp_allreduce.cuh"
#include "tp_argmax.cuh"

namespace mk::vm {

// Consumers: run instruction w. V: the kernel variant (config.cuh KernelVariant); a batch-1 variant runs only
// the opcodes it compiles (Op<OP>::in_variant; variant_mismatch for the rest). NOOP has no case: the consumers
// leave at it before dispatching (a case for it, even one that falls to the default, moved code in the kernel).
template <int V>
__device__ __forceinline__ bool execute(const Globals& g, const Shared& sm, const int* w) {
  constexpr bool B1 = V == VARIANT_BATCH1_SPLIT || V == VARIANT_BATCH1_FUSED;
  // The tall-tile variant's TILE_MATMUL (its switch case records a mismatch: Op<OP_TILE_MATMUL>::in_variant).
  if constexpr (V == VARIANT_TILES_TALL) {
    if (w[W_OPCODE] == OP_TILE_MATMUL) return op_tile_matmul<true>(g, sm, w);
  }
  // A batch-1 variant's ops take the step as one token of one sequence (state.cuh token_index): any other step
  // is the host's mistake, caught here before an op reads or writes anything.
  if constexpr (B1) {
    if (g.sa_header[SA_NUM_TOKENS] != 1 || g.sa_header[SA_NUM_SEQS] != 1) return variant_mismatch(g, w);
  }
  switch (w[W_OPCODE]) {
#define MK_EXECUTE(NAME, CODE, WEIGHTS)                                                           \
  case OP_##NAME:                                                                                 \
    if constexpr (Op<OP_##NAME>::in_variant(V)) return Op<OP_##NAME>::template execute<B1>(g, sm, w); \
    else return variant_mismatch(g, w);
    MK_OPCODES(MK_EXECUTE)
#undef MK_EXECUTE
    default:
      if (threadIdx.x == 0) record_error(g, ERR_BAD_OPCODE, w, -1, 0, 0);
      return false;
  }
}

// Whether the consumers running op give the loader its chain cap (Op<OP>::CHAIN).
__host__ __device__ constexpr bool is_chain_op(int op) {
#define MK_CHAIN(NAME, CODE, WEIGHTS) \
  if constexpr (Op<OP_##NAME>::CHAIN) if (op == OP_##NAME) return true;
  MK_OPCODES(MK_CHAIN)
#undef MK_CHAIN
  return false;
}

// Controller: the weight rows instruction w streams (Op<OP>::weights of the STREAMED opcodes; none for the
// rest), derived where the opcode switch and the divisions cost nothing, for the slot's stream words.
#define MK_WEIGHTS_NONE(NAME)
#define MK_WEIGHTS_STREAMED(NAME) \
  case OP_##NAME: s = Op<OP_##NAME>::weights(g, in); break;
#define MK_WEIGHTS(NAME, CODE, WEIGHTS) MK_WEIGHTS_##WEIGHTS(NAME)
__device__ __forceinline__ WeightStream weight_stream(const Globals& g, const int* w) {
  WeightStream s;
  const int op = w[W_OPCODE];
  const StreamInputs in{w[W_LAYER], w + W_OPERANDS, g.hidden_size, g.intermediate,
                        (long long)g.n_heads * g.head_dim};
  switch (op) {
    MK_OPCODES(MK_WEIGHTS)
    default:
      break;
  }
  return s;
}
#undef MK_WEIGHTS
#undef MK_WEIGHTS_STREAMED
#undef MK_WEIGHTS_NONE

}  // namespace mk::vm
