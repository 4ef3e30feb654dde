// sampling/sampling_config.cuh: the sampling kernel's shape (threads, cluster, radix bins, top-k candidates) and its
// arguments.
#pragma once

#include <cstdint>

namespace mk::sampling {

inline constexpr int SAMPLE_THREADS = 512;
inline constexpr int SAMPLE_WARPS = SAMPLE_THREADS / 32;
inline constexpr int CLUSTER_BLOCKS = 8;  // the portable cluster size
inline constexpr int RADIX_BITS = 8;
inline constexpr int RADIX_BINS = 1 << RADIX_BITS;
inline constexpr int RADIX_PASSES = 32 / RADIX_BITS;
inline constexpr int HIST_STRIDE = RADIX_BINS + 1;  // per-warp histograms one bank apart
static_assert(RADIX_BINS == 8 * 32, "the bin scan gives each lane of one warp 8 bins");
static_assert(32 % RADIX_BITS == 0, "the radix passes cover the 32-bit key exactly");
static_assert(RADIX_BINS <= SAMPLE_THREADS, "one thread clears / merges each bin");

// Slices begin on 16-byte boundaries so the first pass can read the row as float4.
inline constexpr int SLICE_ALIGN = 4;

// Top-k through candidates: a row with 0 < k <= FAST_TOP_K has each block hand its tokens at or above a local bound
// of the k-th largest (about k of them) to block 0, which finishes the row alone. CAND_PER_BLOCK is the room per
// block; a block with more (ties at its bound) sends the row through the whole-row radix passes instead.
inline constexpr int FAST_TOP_K = 256;
inline constexpr int CAND_PER_BLOCK = 512;
inline constexpr int CAND_PER_THREAD = CLUSTER_BLOCKS * CAND_PER_BLOCK / SAMPLE_THREADS;  // block 0's share
static_assert(CLUSTER_BLOCKS * CAND_PER_BLOCK % SAMPLE_THREADS == 0, "block 0 loads the candidates evenly");
static_assert(FAST_TOP_K <= CAND_PER_BLOCK, "a block sends at least k candidates");
static_assert(FAST_TOP_K <= 2 * SAMPLE_THREADS, "the local bound picks among each thread's two largest");

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
  int* run_stop;               // the run's stop state (../run_stop.cuh), or null
  int run_step;                // this launch's step of the run (with run_stop)
  // The on-device decode loop's next step (../advance.cuh), or null: each row's drawn id becomes its next input
  // token and its position moves one forward, checked against the run's stop state, by the thread that writes the
  // id, so no advance kernel runs between this launch and the next step.
  int* step_args;
  int* step_error;             // with step_args, the step's error word: set, the ids feed nothing; a missing KV
                               // page for the next position is reported there
};

// Tokens per block: ceil(vocab / CLUSTER_BLOCKS) rounded up to SLICE_ALIGN (the last blocks may get fewer or none).
__host__ __device__ constexpr int slice_len(int vocab) {
  const int even = (vocab + CLUSTER_BLOCKS - 1) / CLUSTER_BLOCKS;
  return (even + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
}
static_assert(slice_len(128256) == 16032 && slice_len(1001) == 128 && slice_len(5) == 4);

}  // namespace mk::sampling
