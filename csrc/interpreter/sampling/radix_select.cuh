// sampling/radix_select.cuh: top-k and top-p thresholds by radix selection over the kept tokens' keys (count or
// probability-mass histograms, merged over the cluster): no row is ever sorted.
#pragma once

#include "cluster_reduce.cuh"
#include "sampling_noise.cuh"

namespace mk::sampling {

struct RowView {
  const float* x;  // this block's slice, filtered (see `filter_slice`), in shared memory (x[i]: token begin + i)
  uint32_t min_key;  // keys below it are dropped (top-k's threshold; 0: none)
  int begin, n;      // the slice: tokens begin .. begin + n - 1

  __device__ __forceinline__ float filtered(int i) const { return x[i]; }
};

// In place: each penalised logit shifted by the row's max, divided by the temperature, -inf where min-p drops it
// (filters.filtered's first steps, the same float operations).
__device__ __forceinline__ void filter_slice(float* x, int n, float xmax, float temperature, float log_min_p) {
  for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
    const float s = (x[i] - xmax) / temperature;
    x[i] = s < log_min_p ? -INFINITY : s;
  }
  __syncthreads();
}

// Warp 0 picks the digit: the highest bin where the weight from the top reaches `target` (rounding may leave
// the total short of it: then the lowest bin holding weight). Writes sh.digit and sh.above.
__device__ void scan_bins(SampleShared& sh, float above, float target) {
  const int lane = threadIdx.x, top = RADIX_BINS - 1 - 8 * lane;  // lane l owns bins 255-8l .. 248-8l
  float own = 0.f;
  for (int i = 0; i < 8; ++i) own += sh.merged[top - i];
  float before = own;
  for (int off = 1; off < 32; off *= 2) {
    const float o = __shfl_up_sync(0xFFFFFFFFu, before, off);
    if (lane >= off) before += o;
  }
  before -= own;
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, above + before + own >= target);
  const unsigned nonempty = __ballot_sync(0xFFFFFFFFu, own > 0.f);
  const int owner = ballot ? __ffs(ballot) - 1 : 31 - __clz(nonempty | 1u);
  if (lane != owner) return;
  float cum = above + before;
  int digit = top - 7;
  if (ballot) {
    for (int i = 0; i < 8; ++i) {
      digit = top - i;
      if (cum + sh.merged[digit] >= target) break;
      cum += sh.merged[digit];
    }
  } else {
    for (int i = 7; i >= 0; --i) {
      if (sh.merged[top - i] > 0.f) {
        digit = top - i;
        break;
      }
    }
    for (int b = top; b > digit; --b) cum += sh.merged[b];
  }
  sh.digit = digit;
  sh.above = cum;
}

// The largest key t with weight(keys >= t) >= target over the kept tokens of the whole row (weight 1 per token:
// the target-th largest key; weight exp(scaled): the top-p threshold). 8 bits per pass: per-warp histograms,
// merged per block, then over the cluster; every block scans the same merged bins.
template <bool MASS>
__device__ uint32_t select_key(const RowView& r, float target, SampleShared& sh, cg::cluster_group& cluster) {
  uint32_t prefix = 0;
  float above = 0.f;  // weight of the tokens whose key is above the prefix chosen so far
  float* mine = sh.hist + (threadIdx.x / 32) * HIST_STRIDE;
  for (int shift = 32 - RADIX_BITS; shift >= 0; shift -= RADIX_BITS) {
    for (int i = threadIdx.x; i < SAMPLE_WARPS * HIST_STRIDE; i += SAMPLE_THREADS) sh.hist[i] = 0.f;
    __syncthreads();
    const uint32_t high = shift + RADIX_BITS >= 32 ? 0u : ~0u << (shift + RADIX_BITS);
    // A thread's run of tokens in one bin goes to shared memory as one atomic: the first passes put nearly
    // every token in the same bin or two (similar exponents), where per-token atomics would serialise.
    int run_bin = -1;
    float run = 0.f;
    for (int i = threadIdx.x; i < r.n; i += SAMPLE_THREADS) {
      const float s = r.filtered(i);
      const uint32_t key = order_key(s);
      if (key < r.min_key || (key & high) != (prefix & high)) continue;
      const int bin = static_cast<int>((key >> shift) & (RADIX_BINS - 1));
      const float w = MASS ? expf(s) : 1.f;
      if (bin != run_bin) {
        if (run_bin >= 0) atomicAdd(mine + run_bin, run);
        run_bin = bin;
        run = w;
      } else {
        run += w;
      }
    }
    if (run_bin >= 0) atomicAdd(mine + run_bin, run);
    __syncthreads();
    for (int b = threadIdx.x; b < RADIX_BINS; b += SAMPLE_THREADS) {
      float total = 0.f;
      for (int w = 0; w < SAMPLE_WARPS; ++w) total += sh.hist[w * HIST_STRIDE + b];
      sh.part.bins[b] = total;
    }
    cluster.sync();
    for (int b = threadIdx.x; b < RADIX_BINS; b += SAMPLE_THREADS) {
      float total = 0.f;
      for (int rank = 0; rank < CLUSTER_BLOCKS; ++rank) total += cluster.map_shared_rank(&sh.part, rank)->bins[b];
      sh.merged[b] = total;
    }
    __syncthreads();
    if (threadIdx.x < 32) scan_bins(sh, above, target);
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.digit) << shift;
    above = sh.above;
    cluster.sync();  // every block has read the bins before any writes them again
  }
  return prefix;
}

}  // namespace mk::sampling
