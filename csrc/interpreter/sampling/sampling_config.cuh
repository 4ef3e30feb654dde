// sampling/sampling_config.cuh: the sampling kernel's shape (threads, cluster, radix bins) and its arguments.
#pragma once

#include <cstdint>

namespace mk::sampling {

inline constexpr int SAMPLE_THREADS = 512;
inline constexpr int SAMPLE_WARPS = SAMPLE_THREADS / 32;
inline constexpr int CLUSTER_BLOCKS = 8;  // the portable cluster size
inline constexpr int RADIX_BITS = 8;
inline constexpr int RADIX_BINS = 1 << RADIX_BITS;
inline constexpr int HIST_STRIDE = RADIX_BINS + 1;  // per-warp histograms one bank apart
static_assert(RADIX_BINS == 8 * 32, "the bin scan gives each lane of one warp 8 bins");
static_assert(32 % RADIX_BITS == 0, "the radix passes cover the 32-bit key exactly");

// Per-row settings and state (device arrays; row s at index s). engine/sampling/tensors.py builds them.
struct SampleArgs {
  const float* logits;   // [rows, logits_stride]
  int vocab;
  int logits_stride;
  const uint8_t* greedy;       // bool
  const float* temperature;    // the divisor (1 for greedy rows)
  const float* log_min_p;      // -inf: off
  const int64_t* top_k;        // 0: off
  const float* top_p;          // 1: off
  const double* repetition;    // 1: off
  const double* frequency;
  const double* presence;
  const int64_t* keys;         // [rows, 2]: the noise key's low and high 32-bit words
  int64_t* counters;           // the row's generated tokens so far; +1 per step
  int* counts;                 // [rows, vocab] generated-token counts, or null (no row has penalties)
  uint8_t* seen;               // [rows, vocab] prompt or output holds the token, or null
  int* out_ids;                // [rows]
  uint8_t* out_valid;          // [rows]: 0 where the row's logits were not all finite (its id is then 0)
};

}  // namespace mk::sampling
