// advance.cuh: the on-device decode loop's glue. After a decode step, feed each sequence's sampled id
// back as its next input token and move its position, context length and KV slot one forward, so
// benchmark loops launch step after step without a host round trip (like a CUDA-graph baseline).
#pragma once

#include "opcodes.cuh"

namespace mk::vm {

inline constexpr int ERR_NO_PAGE = 4;  // the block table has no page for the next position

__global__ void advance_decode(int* step_args, const int* out_tokens, int* history, int step, int* error) {
  const int S = step_args[SA_NUM_SEQS], s = threadIdx.x;
  if (s >= S) return;
  if (*reinterpret_cast<volatile const int*>(error) != 0) return;  // the step failed: out_tokens invalid
  int* w = step_args;
  const int ps = w[SA_PAGE_SIZE], max_pages = w[SA_MAX_PAGES];
  const int tok = out_tokens[s];
  history[step * S + s] = tok;
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

}  // namespace mk::vm
