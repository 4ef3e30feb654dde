// run_stop.cuh: the stop state of a run of decode steps on the device (engine/run_stops.py builds it once per
// run). Each step's new ids are checked against each row's stop ids and token budget as they are fed back
// (ARGMAX_REDUCE in the greedy loop, the advance kernel after sampling); once every row has stopped, the run's
// later launches exit at their start (run_stopped_before), so the GPU stops spending time on steps the host
// drops. The host stays the judge of what a request sees: these flags only save work.
#pragma once

namespace mk::vm {

// int32 words: a header, then one record of RS_ROW_WORDS + K words per row (engine/run_stops.py mirrors them).
inline constexpr int RS_STOPPED_AT = 0;    // the run's step that stopped its last row; RS_NOT_STOPPED before
inline constexpr int RS_RUNNING = 1;       // rows not stopped yet
inline constexpr int RS_NUM_ROWS = 2;
inline constexpr int RS_IDS_PER_ROW = 3;   // K: each row's stop ids, padded with -1 (never a token)
inline constexpr int RS_HEADER_WORDS = 4;
inline constexpr int RS_ROW_STOPPED = 0;    // 1 once the row stopped (its later tokens are not checked)
inline constexpr int RS_ROW_GENERATED = 1;  // tokens the row produced in the run so far
inline constexpr int RS_ROW_BUDGET = 2;     // its length stop: the budget-th token of the run (max_tokens, context)
inline constexpr int RS_ROW_MIN_COUNT = 3;  // its stop ids end it only from this token of the run on (min_tokens)
inline constexpr int RS_ROW_WORDS = 4;      // ... then its K stop ids
inline constexpr int RS_NOT_STOPPED = 0x7fffffff;  // above every step: run_stopped_before is false
static_assert(RS_STOPPED_AT < RS_HEADER_WORDS && RS_RUNNING < RS_HEADER_WORDS && RS_NUM_ROWS < RS_HEADER_WORDS &&
                  RS_IDS_PER_ROW < RS_HEADER_WORDS,
              "the header words fit the header");
static_assert(RS_ROW_STOPPED < RS_ROW_WORDS && RS_ROW_GENERATED < RS_ROW_WORDS && RS_ROW_BUDGET < RS_ROW_WORDS &&
                  RS_ROW_MIN_COUNT < RS_ROW_WORDS,
              "a row's words come before its stop ids");

// Whether the run `rs` stopped at a step before `step` (nullptr: no device stop checks). Every block of a launch
// must take the same decision, and the word may be written during this very launch (by its ARGMAX_REDUCE), but
// only with the value `step` itself, for which the answer is false as it was before: the decision depends only
// on what earlier launches wrote.
__device__ __forceinline__ bool run_stopped_before(const int* rs, int step) {
  return rs != nullptr && __ldcg(rs + RS_STOPPED_AT) < step;
}

// Row s produced `tok` at the run's step `step`: mark it stopped at a stop id (from its min_count-th token on) or
// at its budget, and the run once its last row stopped. One thread per row and launch touches the row's words
// (lane 0 of the row's warp in ARGMAX_REDUCE, thread s of the advance kernel), launches run in stream order: the
// row's words need no atomics, the shared count does.
__device__ __forceinline__ void note_run_token(int* rs, int s, int tok, int step) {
  const int K = rs[RS_IDS_PER_ROW];
  int* row = rs + RS_HEADER_WORDS + s * (RS_ROW_WORDS + K);
  if (row[RS_ROW_STOPPED] != 0) return;
  const int n = row[RS_ROW_GENERATED] + 1;
  row[RS_ROW_GENERATED] = n;
  bool stop = n >= row[RS_ROW_BUDGET];
  if (n >= row[RS_ROW_MIN_COUNT])
    for (int k = 0; k < K && !stop; ++k) stop = row[RS_ROW_WORDS + k] == tok;
  if (!stop) return;
  row[RS_ROW_STOPPED] = 1;
  if (atomicSub(rs + RS_RUNNING, 1) == 1) atomicExch(rs + RS_STOPPED_AT, step);
}

}  // namespace mk::vm
