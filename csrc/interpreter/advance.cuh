// advance.cuh: the on-device decode loop's glue. After a decode step, feed each sequence's sampled id
// back as its next input token and move its position, context length and KV slot one forward, so
// benchmark loops launch step after step without a host round trip (like a CUDA-graph baseline). Either
// ARGMAX_REDUCE does it at the end of the step (Globals::advance_history), the sampling kernel's finishing thread
// after a sampled step (sampling/sample_rows.cuh), or a one-block kernel after the step; in a run with device stop
// checks (run_stop.cuh) the same places check the ids.
#pragma once

#include "../tk/grid_dependency.cuh"
#include "opcodes.cuh"
#include "run_stop.cuh"

namespace mk::vm {

inline constexpr int ERR_NO_PAGE = 4;  // the block table has no page for the next position

// Sequence s sampled `tok`: advance its step args (its next input token, position, context length and KV slot).
// Safe only once every reader of the step args in the step has finished: at ARGMAX_REDUCE (all of them are its
// ancestors), or in a kernel after the step (the advance kernel below, the sampling kernel's finishing thread).
__device__ __forceinline__ void advance_step_args(int* step_args, int s, int tok, int* error) {
  int* w = step_args;
  const int ps = w[SA_PAGE_SIZE], max_pages = w[SA_MAX_PAGES];
  const int t = w[w[SA_OFF_QUERY_START] + s];  // decode: one token per sequence
  const int pos = w[w[SA_OFF_POSITIONS] + t] + 1;
  const int page_index = pos / ps;
  const int page = page_index < max_pages ? w[w[SA_OFF_BLOCK_TABLES] + s * max_pages + page_index] : -1;
  if (page < 0) {
    atomicCAS(error, 0, ERR_NO_PAGE);
    return;
  }
  w[w[SA_OFF_TOKEN_IDS] + t] = tok;
  w[w[SA_OFF_POSITIONS] + t] = pos;
  w[w[SA_OFF_CONTEXT_LENS] + s] = pos + 1;
  w[w[SA_OFF_SLOTS] + t] = page * ps + pos % ps;
}

// ... and record `tok` in the history row first.
__device__ __forceinline__ void advance_sequence(int* step_args, int s, int tok, int* history_row, int* error) {
  history_row[s] = tok;
  advance_step_args(step_args, s, tok, error);
}

// The step's ids feed the next step unless the step failed (its error word set: its ids mean nothing).
__device__ __forceinline__ bool step_failed(const int* error) {
  return *reinterpret_cast<volatile const int*>(error) != 0;
}

// Launched after each step (with PDL where the step was: it then starts early and waits here). With `run_stop`
// (run_stop.cuh; nullptr: none) step `step` of a run checks its ids, and does nothing once the run stopped at an
// earlier step: that step's megakernel launch did no work, so out_tokens holds no new ids.
__global__ void advance_decode(int* step_args, const int* out_tokens, int* history, int step, int* error,
                               int* run_stop) {
  tk::allow_dependent_grids();
  tk::wait_prerequisite_grids();
  const int S = step_args[SA_NUM_SEQS], s = threadIdx.x;
  if (s >= S) return;
  if (step_failed(error)) return;
  if (run_stopped_before(run_stop, step)) return;
  const int tok = out_tokens[s];
  advance_sequence(step_args, s, tok, history + step * S, error);
  if (run_stop) note_run_token(run_stop, s, tok, step);
}

}  // namespace mk::vm
