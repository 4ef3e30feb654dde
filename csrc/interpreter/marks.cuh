// marks.cuh: sub-phase timestamps inside an instruction, for `megakernel profile` (timing records on).
// They answer "where inside its exec time does an op spend" — activation load, waiting for weight
// pages, the matvec, the epilogue — which the start/ready/end words alone cannot. A mark costs one
// predicated-off branch when timing is off (Globals::timing is a kernel parameter).
//
// Matvec ops:  MARK_INPUT      activations in shared x (norm done)
//              MARK_FIRST_PAGE the instruction's first weight page became ready for its warp (warp 0)
//              MARK_LAST_PAGE  the instruction's last weight page became ready for its warp
//              MARK_LAST_DONE  that warp finished the last page's dot products
//              MARK_LAST_PAGE_CYCLES  SM cycles (clock64) of those dot products alone (batch-1 tensor-core
//                              pages): what a change to the page loop did, without the marks' own cost
//              MARK_COMPUTED   matvec done (every warp, after the consumer barrier)
//              MARK_LOADER     the loader issued the instruction's last page
// Attention:   MARK_INPUT      queries and block table in shared memory
//              MARK_LAST_PAGE  warp 0 finished its keys
//              MARK_LAST_PAGE_CYCLES  (ring pages) warp 0's SM cycles inside its folds, its waits left out
//              MARK_COMPUTED   every warp finished its keys (the merge and the output follow)
// ATTN_O_PROJ: the matvec marks, with MARK_INPUT when its attention output is in x (so the "input"
//              interval is the whole attention, and the rest reads like an O-proj)
#pragma once

#include "globals.cuh"
#include "opcodes.cuh"
#include "../tk/util.cuh"

namespace mk::vm {

enum TimingMark : int {
  MARK_INPUT = 0, MARK_LAST_PAGE = 1, MARK_COMPUTED = 2, MARK_LOADER = 3, MARK_LAST_DONE = 4, MARK_FIRST_PAGE = 5,
  MARK_LAST_PAGE_CYCLES = 6,  // not a time: SM clock cycles of the last page's dot products (timing_value)
  NUM_MARKS
};
static_assert(TIMING_MARK0 + NUM_MARKS <= TIMING_WORDS, "marks must fit in the timing record");

// Called by one thread per site; each site is reached once per instruction.
__device__ __forceinline__ void timing_mark(const Globals& g, const int* w, int mark) {
  if (g.timing == nullptr) return;
  g.timing[(long long)w[W_ID] * TIMING_WORDS + TIMING_MARK0 + mark] = (long long)tk::globaltimer();
}

// A measured quantity instead of a timestamp (MARK_LAST_PAGE_CYCLES), same slot layout.
__device__ __forceinline__ void timing_value(const Globals& g, const int* w, int mark, long long value) {
  if (g.timing == nullptr) return;
  g.timing[(long long)w[W_ID] * TIMING_WORDS + TIMING_MARK0 + mark] = value;
}

}  // namespace mk::vm
