// op_traits.cuh: what an opcode's header (ops/<name in lower case>.cuh) declares for the dispatch
// (ops/dispatch.cuh).
#pragma once

#include "config.cuh"
#include "globals.cuh"
#include "opcodes.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

// Specialised once per dispatched opcode (MK_OPCODES, opcodes.cuh), in ops/<name in lower case>.cuh, as
// `template <> struct Op<OP_NAME> : OpTraits`. Every specialisation has the consumers' side,
//
//   template <bool B1> __device__ __forceinline__ static bool execute(const Globals&, const Shared&, const int* w)
//
// which runs instruction w (its slot words) on the consumer warps once its dependencies are met, and returns
// false where it recorded an error (every consumer thread returns the same). B1: the kernel is a batch-1 variant
// (config.cuh KernelVariant), whose steps are one token of one sequence. An opcode marked STREAMED in MK_OPCODES
// also has its weight stream,
//
//   __device__ __forceinline__ static WeightStream weights(const Globals&, const StreamInputs&)
//
// the weight rows its instructions stream through the page ring (weight_stream.cuh), from their layer and
// operands: derived by the controller when it fetches an instruction. The rest it may override from OpTraits.
template <int OP>
struct Op;

struct OpTraits {
  // Whether the kernel variant v (config.cuh KernelVariant) compiles the op; in the others an instruction of it
  // records a variant mismatch (state.cuh) and runs nothing.
  static constexpr bool in_variant(int) { return true; }
  // A latency-bound op between two MLPs: while the consumers run it, the loader's copies (the MLP's next
  // pages) get the lower in-flight cap Globals::chain_inflight_pages (consumer.cuh, roles.cuh).
  static constexpr bool CHAIN = false;
};

}  // namespace mk::vm
