// sampling/radix_select.cuh: the scaled logits, the bin scan of every radix selection, and top-k / top-p thresholds
// over a whole row by radix selection (count or probability-mass histograms, merged over the cluster): no row is
// ever sorted. The path of top-p without top-k, of top-k above FAST_TOP_K and of rows whose candidates overflow.
#pragma once

#include "cluster_reduce.cuh"
#include "sampling_noise.cuh"

namespace mk::sampling {

// filters.filtered's first steps with the same float operations: shifted by the row's max, divided by the
// temperature, -inf where min-p drops it. Non-decreasing in y, so any order statistic of the penalised logits maps
// to the same order statistic of the scaled ones.
__device__ __forceinline__ float scaled_logit(float y, float ymax, float temperature, float log_min_p) {
  const float s = (y - ymax) / temperature;
  return s < log_min_p ? -INFINITY : s;
}

// Below the returned value a penalised logit y cannot scale to `cut` or above, with cut = -C < 0: scaled_logit
// >= -C means fl(fl(ymax - y) / t) <= C, so (ymax - y) / t <= C (1 + 2^-23) (C a normal float) and ymax - y <=
// t C (1 + 2^-21) + 2^-126 (the subtraction's rounding, or its flush to 0); the bound takes 2^-18 and 1e-37 of slack,
// computed in float64 and rounded down. -inf (no shortcut: every token is scaled) where C is not comfortably normal.
__device__ __forceinline__ float scaled_floor(float cut, float ymax, float temperature) {
  const float c = -cut;
  if (!(c >= 0x1p-100f) || isinf(c)) return -INFINITY;
  const double d = static_cast<double>(ymax) -
                   static_cast<double>(temperature) * static_cast<double>(c) * (1.0 + 0x1p-18) - 1e-37;
  return __double2float_rd(d);
}

struct RowView {
  const float* x;    // this block's slice, scaled (`filter_slice`), in shared memory (x[i]: token begin + i)
  uint32_t min_key;  // keys below it are dropped (top-k's threshold; 0: none)
  int begin, n;      // the slice: tokens begin .. begin + n - 1
};

__device__ __forceinline__ void filter_slice(float* x, int n, float ymax, float temperature, float log_min_p) {
  for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) x[i] = scaled_logit(x[i], ymax, temperature, log_min_p);
  __syncthreads();
}

// Warp 0 picks the digit: the highest bin where the weight from the top (plus `above`) reaches the target
// (rounding may leave the total short of it: then the lowest bin holding weight). The target is `target`, or
// `target` times the bins' total where `fraction` (top-p's share of the kept mass). Writes sh.digit, sh.above (the
// weight above the digit's bin), sh.bin_weight (its bin's), sh.total and sh.target; reads `bins` only here, so
// the caller may clear them once the block has synchronised.
__device__ void scan_bins(const float* bins, float above, float target, bool fraction, SampleShared& sh) {
  const int lane = threadIdx.x, top = RADIX_BINS - 1 - 8 * lane;  // lane l owns bins 255-8l .. 248-8l
  float own = 0.f;
  for (int i = 0; i < 8; ++i) own += bins[top - i];
  float before = own;
  for (int off = 1; off < 32; off *= 2) {
    const float o = __shfl_up_sync(0xFFFFFFFFu, before, off);
    if (lane >= off) before += o;
  }
  const float total = __shfl_sync(0xFFFFFFFFu, before, 31);
  if (fraction) target *= total;
  before -= own;
  if (lane == 0) {
    sh.total = total;
    sh.target = target;
  }
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, above + before + own >= target);
  const unsigned nonempty = __ballot_sync(0xFFFFFFFFu, own > 0.f);
  const int owner = ballot ? __ffs(ballot) - 1 : 31 - __clz(nonempty | 1u);
  if (lane != owner) return;
  float cum = above + before;
  int digit = top - 7;
  if (ballot) {
    for (int i = 0; i < 8; ++i) {
      digit = top - i;
      if (cum + bins[digit] >= target) break;
      cum += bins[digit];
    }
  } else {
    for (int i = 7; i >= 0; --i) {
      if (bins[top - i] > 0.f) {
        digit = top - i;
        break;
      }
    }
    for (int b = top; b > digit; --b) cum += bins[b];
  }
  sh.digit = digit;
  sh.above = cum;
  sh.bin_weight = bins[digit];
}

// The largest key t with weight(keys >= t) >= target over the kept tokens of the whole row (weight 1 per token:
// the target-th largest key; MASS, weight exp(scaled): the top-p threshold, `target` then the fraction of the kept
// mass). 8 bits per pass: per-warp histograms, merged per block, then over the cluster; every block scans the same
// merged bins. One cluster barrier per pass: a pass's block histograms alternate between two buffers, so a buffer
// is written again only after every block has passed the next pass's barrier, long after it read the buffer.
template <bool MASS>
__device__ uint32_t select_key(const RowView& r, float target, SampleShared& sh, cg::cluster_group& cluster) {
  uint32_t prefix = 0;
  float above = 0.f;  // weight of the tokens whose key is above the prefix chosen so far
  float* mine = sh.hist + (threadIdx.x / 32) * HIST_STRIDE;
  for (int pass = 0; pass < RADIX_PASSES; ++pass) {
    const int shift = 32 - RADIX_BITS * (pass + 1);
    for (int i = threadIdx.x; i < SAMPLE_WARPS * HIST_STRIDE; i += SAMPLE_THREADS) sh.hist[i] = 0.f;
    __syncthreads();
    const uint32_t high = pass == 0 ? 0u : ~0u << (shift + RADIX_BITS);
    // A thread's run of tokens in one bin goes to shared memory as one atomic: the first passes put nearly
    // every token in the same bin or two (similar exponents), where per-token atomics would serialise.
    int run_bin = -1;
    float run = 0.f;
    for (int i = threadIdx.x; i < r.n; i += SAMPLE_THREADS) {
      const float s = r.x[i];
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
    float* part = sh.part_bins[pass & 1];
    for (int b = threadIdx.x; b < RADIX_BINS; b += SAMPLE_THREADS) {
      float total = 0.f;
      for (int w = 0; w < SAMPLE_WARPS; ++w) total += sh.hist[w * HIST_STRIDE + b];
      part[b] = total;
    }
    cluster.sync();
    for (int b = threadIdx.x; b < RADIX_BINS; b += SAMPLE_THREADS) {
      float other[CLUSTER_BLOCKS];  // every remote load in flight before the first is added
#pragma unroll
      for (int rank = 0; rank < CLUSTER_BLOCKS; ++rank) other[rank] = cluster.map_shared_rank(part, rank)[b];
      float total = 0.f;
#pragma unroll
      for (int rank = 0; rank < CLUSTER_BLOCKS; ++rank) total += other[rank];  // rank order: the same in every block
      sh.merged[b] = total;
    }
    __syncthreads();
    if (threadIdx.x < 32) scan_bins(sh.merged, above, target, MASS && pass == 0, sh);
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.digit) << shift;
    above = sh.above;
    if (pass == 0) target = sh.target;
  }
  return prefix;
}

}  // namespace mk::sampling
