// sampling/block_select.cuh: radix selection inside one block over a few entries per thread held in registers
// (a block's largest logits, or block 0's top-k candidates): block barriers only, no cluster barrier.
#pragma once

#include "radix_select.cuh"

namespace mk::sampling {

// The largest key t such that the weight of the live entries with key >= t reaches `target`: weight 1 each (the
// target-th largest key) or, MASS, the entries' weights with `target` a fraction of their total (top-p). Entries
// [e] of every thread take part for e < `slots` (uniform over the block). Only the top RADIX_BITS * passes bits
// are selected, the rest left 0: a lower bound of the exact key that keeps a superset. An exact selection (all
// passes, no MASS) ends early where every entry of the chosen bin is needed to reach the target: the bin's lowest
// key (the rest of its bits 0) then keeps exactly the same entries. (A bound keeps its passes: it is applied to
// more values than the entries, where the lower bits narrow it.) `total` receives the live entries' weight (below the
// target: every live entry is kept, and the key returned means nothing).
template <int E, bool MASS>
__device__ uint32_t block_select(const uint32_t (&key)[E], const bool (&live)[E], const float (&weight)[E],
                                 int slots, float target, int passes, float& total, SampleShared& sh) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (threadIdx.x < RADIX_BINS) sh.bins[0][threadIdx.x] = 0.f;
  __syncthreads();
  uint32_t prefix = 0;
  float above = 0.f;
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = 32 - RADIX_BITS * (pass + 1);
    const uint32_t high = pass == 0 ? 0u : ~0u << (shift + RADIX_BITS);
    float* bins = sh.bins[pass & 1];
    // The other buffer, for the next pass: its last reader was the previous pass's scan, before its barrier.
    if (threadIdx.x < RADIX_BINS) sh.bins[(pass + 1) & 1][threadIdx.x] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      if (e >= slots) break;
      const bool has = live[e] && (key[e] & high) == (prefix & high);
      const int bin = static_cast<int>((key[e] >> shift) & (RADIX_BINS - 1));
      if constexpr (MASS) {
        if (has) atomicAdd(bins + bin, weight[e]);
      } else {
        // One atomic per bin and warp: the first pass puts nearly every entry in one bin or two (similar exponents),
        // where an atomic per entry would serialise.
        const unsigned active = __ballot_sync(0xFFFFFFFFu, has);
        if (has) {
          const unsigned peers = __match_any_sync(active, bin);
          if (lane == __ffs(peers) - 1) atomicAdd(bins + bin, static_cast<float>(__popc(peers)));
        }
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) scan_bins(bins, above, target, MASS && pass == 0, sh);
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.digit) << shift;
    if (pass == 0) {
      total = sh.total;
      target = sh.target;
    }
    above = sh.above;
    // uniform: every thread read the same values
    if (!MASS && passes == RADIX_PASSES && above + sh.bin_weight == target) break;
  }
  return prefix;
}

}  // namespace mk::sampling
