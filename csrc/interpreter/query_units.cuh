// query_units.cuh: a spread ATTN_PARTIAL's query unit resolved to the sequence and token part it covers
// (engine/instructions/query_units.py), by the controller when it fetches the instruction: the consumers then run it
// as the plain (seq, q_part, q_parts) instruction it names. Why: a stream is compiled for a step's counts, not for
// which sequences bring prompt chunks, and the host deals the units out with each step's args.
#pragma once

#include "code_size.cuh"

#include "state.cuh"

namespace mk::vm {

// ATTN_PARTIAL's operand words (engine/instructions/ops/attn_partial.py OPERANDS).
inline constexpr int W_ATTN_SEQ = W_OPERANDS, W_ATTN_Q_PART = W_OPERANDS + 6, W_ATTN_Q_PARTS = W_OPERANDS + 7,
                     W_ATTN_SPREAD = W_OPERANDS + 8;

// Controller, whole warp, after the slot's words are copied: a spread ATTN_PARTIAL (unit q_part) becomes the plain
// one of its unit's sequence (seq -1: a unit past the step's work, which does nothing). Each lane reads every 32nd
// unit start (they rise with the sequence), so a step of S sequences costs (S + 1) / 32 rounds of independent loads.
__device__ __forceinline__ void resolve_query_unit(const Globals& g, int* slot) {
  if (slot[W_OPCODE] != OP_ATTN_PARTIAL || !slot[W_ATTN_SPREAD]) return;
  const StepArgs sa(g);
  const int unit = slot[W_ATTN_Q_PART], S = sa.num_seqs(), lane = tk::lane_id();
  int at_or_before = 0;  // unit starts <= unit: sequences 0 .. at_or_before - 1 start at or before it
  for (int base = 0; base <= S; base += 32) {
    const int s = base + lane;
    const unsigned below = __ballot_sync(tk::FULL_MASK, s <= S && sa.query_unit_start(s) <= unit);
    at_or_before += __popc(below);
    if (below != tk::FULL_MASK) break;
  }
  __syncwarp();
  if (lane == 0) {
    const int s = at_or_before - 1;  // >= 0: start[0] = 0
    if (s >= S) {
      slot[W_ATTN_SEQ] = -1;
    } else {
      const int first = sa.query_unit_start(s);
      slot[W_ATTN_SEQ] = s;
      slot[W_ATTN_Q_PART] = unit - first;
      slot[W_ATTN_Q_PARTS] = sa.query_unit_start(s + 1) - first;
    }
    slot[W_ATTN_SPREAD] = 0;
  }
  __syncwarp();
}

}  // namespace mk::vm
