// sampling/topk_finish.cuh: block 0 finishes a top-k row alone over the cluster's candidates (topk_candidates.cuh):
// the exact k-th largest, top-p over what top-k kept, and the Gumbel-max draw, as filters.filtered orders them.
// Drawing over the kept candidates gives the full row's draw: a token's noise depends only on (key, step, token id),
// and every token outside the candidates is dropped by top-k.
#pragma once

#include "block_select.cuh"

namespace mk::sampling {

// The drawn token id (every thread of block 0 receives it); after the cluster barrier that published the
// candidates and every rank's CandMeta, none of them past CAND_PER_BLOCK.
__device__ int finish_top_k(const SampleArgs& a, int s, int k, float top_p, SampleShared& sh) {
  constexpr int E = CAND_PER_THREAD;
  // Above the largest bound every token of the row was sent (each block sent all of its own above its bound, which
  // is no higher), and at least k tokens reach it: the row's k-th largest is among the candidates at or above it.
  float cut = -INFINITY;
  int start[CLUSTER_BLOCKS], total = 0;
#pragma unroll
  for (int r = 0; r < CLUSTER_BLOCKS; ++r) {
    cut = fmaxf(cut, sh.meta[r].cut);
    start[r] = total;
    total += sh.meta[r].count;
  }
  const int slots = (total + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
  uint32_t key[E];
  bool live[E];
  float value[E], weight[E];
  int id[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int f = static_cast<int>(threadIdx.x) + e * SAMPLE_THREADS;
    live[e] = false;
    value[e] = -INFINITY;
    id[e] = 0;
    weight[e] = 1.f;
    if (f < total) {
      int r = 0, at = 0;  // the last region starting at or before f (regions are packed: empty ones are skipped)
#pragma unroll
      for (int q = 1; q < CLUSTER_BLOCKS; ++q) {
        if (start[q] <= f) {
          r = q;
          at = start[q];
        }
      }
      const Cand c = sh.cand[r][f - at];
      value[e] = c.value;
      id[e] = c.index;
      live[e] = c.value >= cut;
    }
    key[e] = order_key(value[e]);
  }
  // Top-k: keep keys at or above the k-th largest (ties at it kept, as filters.filtered does).
  float weight_total;
  const uint32_t kth = block_select<E, false>(key, live, weight, slots, static_cast<float>(k), RADIX_PASSES,
                                              weight_total, sh);
  if (weight_total >= static_cast<float>(k)) {
#pragma unroll
    for (int e = 0; e < E; ++e) live[e] = live[e] && key[e] >= kth;
  }
  // Top-p over the kept tokens' renormalised mass (the row's max scales to 0, so every weight is at most 1).
  if (top_p < 1.f) {
#pragma unroll
    for (int e = 0; e < E; ++e) weight[e] = live[e] ? expf(value[e]) : 0.f;
    const uint32_t pk = block_select<E, true>(key, live, weight, slots, top_p, RADIX_PASSES, weight_total, sh);
#pragma unroll
    for (int e = 0; e < E; ++e) live[e] = live[e] && key[e] >= pk;
  }
  const uint32_t row = row_hash(a, s);
  tk::value_index draw{-INFINITY, 0x7FFFFFFF};
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (!live[e] || value[e] < NEVER_WINS) continue;
    const tk::value_index cand{value[e] + gumbel(row, id[e]), id[e]};
    if (tk::beats(cand, draw)) draw = cand;
  }
  return block_argmax(draw, sh.red_arg).index;
}

}  // namespace mk::sampling
