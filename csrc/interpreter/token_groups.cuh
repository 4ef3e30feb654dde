// token_groups.cuh: steps of more tokens than one matvec takes. Shared x holds at most one token group of activation
// rows (Globals::token_group: MAX_TOKEN_GROUP on the tensor cores, else MAX_TOKENS_PER_MATVEC), so a
// weight-streaming instruction of a larger step runs in token groups: load the group's
// rows, multiply them by the instruction's weight pages, write the group's outputs, next group. The pages stay
// in the ring from the first group to the last (PagePass), so the step still reads every weight from HBM once;
// the host cuts these instructions to at most the ring's pages (engine/cuda/limits.py fit_stream).
#pragma once

#include "config.cuh"
#include "state.cuh"

namespace mk::vm {

// Which of an instruction's matvec passes over its pages this is: the first waits for each page to arrive,
// the last frees it (and moves the ring cursor past the instruction); a one-group instruction's only pass is both.
struct PagePass {
  bool first, last;
};
inline constexpr PagePass ONLY_PASS{true, true};

// Tokens [base, base + n) of the step, and the pages' pass that serves them.
struct TokenGroup {
  int base, n;
  PagePass pass;
};

// body(TokenGroup) for each group of at most g.token_group of the step's T rows, in order; false as soon as one
// returns false (an error is recorded). A barrier separates two groups: the next group's loads overwrite
// x, out and the norm's sums in scratch, which the previous group's epilogue may still be reading. B1: the batch-1
// variants (one token, one group; no loop compiled).
template <bool B1, typename Body>
__device__ __forceinline__ bool for_each_token_group(const Globals& g, int T, Body&& body) {
  if constexpr (B1) {
    return body(TokenGroup{0, 1, ONLY_PASS});
  } else {
    const int group = max(1, g.token_group);  // never a loop that does not advance
    for (int base = 0; base < T; base += group) {
      if (base > 0) consumer_sync();
      const int n = min(group, T - base);
      if (!body(TokenGroup{base, n, PagePass{base == 0, base + n >= T}})) return false;
    }
    return true;
  }
}

}  // namespace mk::vm
