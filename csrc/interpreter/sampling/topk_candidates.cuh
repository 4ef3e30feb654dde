// sampling/topk_candidates.cuh: each block's top-k candidates, sent to block 0. A block bounds the row's k-th largest
// scaled logit from below by its own k-th largest (block barriers only), and sends block 0 every token of its slice
// at or above that bound. Block 0 then holds, above the largest of the eight bounds, every token of the row (a
// superset of the top k, ties included), with no cluster-wide selection pass.
#pragma once

#include "block_select.cuh"

namespace mk::sampling {

// A lower bound of the block's k-th largest penalised logit: the k-th largest of its threads' two largest values
// (those are k of its logits) to the top 16 bits of its key. -inf where the block holds fewer than k.
__device__ float local_kth_bound(float top0, float top1, int k, SampleShared& sh) {
  const uint32_t key[2] = {order_key(top0), order_key(top1)};
  const bool live[2] = {top0 > -INFINITY, top1 > -INFINITY};
  const float ones[2] = {1.f, 1.f};
  float total;
  const uint32_t t = block_select<2, false>(key, live, ones, 2, static_cast<float>(k), 2, total, sh);
  return total >= static_cast<float>(k) ? key_float(t) : -INFINITY;
}

// Sends block 0 (region `rank` of sh.cand) every token of the penalised slice xs whose scaled logit is finite and at
// least `cut` (-inf: every finite one), and returns how many there were (only the first CAND_PER_BLOCK are sent).
// The scaled logits are computed only near or above the bound (scaled_floor), where the division decides.
__device__ int send_candidates(const float* xs, int n, int begin, float ymax, float temperature, float log_min_p,
                               float cut, SampleShared& sh, cg::cluster_group& cluster) {
  const int rank = static_cast<int>(cluster.block_rank()), lane = static_cast<int>(threadIdx.x % 32);
  Cand* dst = cluster.map_shared_rank(&sh.cand[rank][0], 0);
  const float ylo = scaled_floor(cut, ymax, temperature);
  const int nq = (n + 3) / 4;  // float4s of the slice (its allocation is whole float4s)
  for (int q0 = 0; q0 < nq; q0 += SAMPLE_THREADS) {  // uniform trip count: the warp votes together
    const int q = q0 + static_cast<int>(threadIdx.x);
    const float4 y4 = q < nq ? reinterpret_cast<const float4*>(xs)[q] : make_float4(0.f, 0.f, 0.f, 0.f);
    const float y[4] = {y4.x, y4.y, y4.z, y4.w};
    float v[4];
    bool keep[4];
    bool any = false;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = -INFINITY;
      if (q < nq && 4 * q + j < n && y[j] >= ylo) v[j] = scaled_logit(y[j], ymax, temperature, log_min_p);
      keep[j] = v[j] > -INFINITY && v[j] >= cut;
      any |= keep[j];
    }
    if (!__any_sync(0xFFFFFFFFu, any)) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned voters = __ballot_sync(0xFFFFFFFFu, keep[j]);
      if (voters == 0) continue;
      int base = 0;
      if (lane == 0) base = atomicAdd(&sh.cand_count, __popc(voters));
      base = __shfl_sync(0xFFFFFFFFu, base, 0);
      const int pos = base + __popc(voters & ((1u << lane) - 1u));
      if (keep[j] && pos < CAND_PER_BLOCK) dst[pos] = Cand{v[j], begin + 4 * q + j};
    }
  }
  __syncthreads();
  return sh.cand_count;
}

}  // namespace mk::sampling
