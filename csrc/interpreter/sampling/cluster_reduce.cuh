// sampling/cluster_reduce.cuh: block and cluster reductions of the sampling kernel (sums and argmax over
// a row spread over a cluster, partial results read through distributed shared memory).
#pragma once

#include <cooperative_groups.h>

#include "../../tk/reduce.cuh"
#include "sampling_config.cuh"

namespace mk::sampling {

namespace cg = cooperative_groups;

// What a block shares with its cluster: one reduction's partial result at a time.
struct Partials {
  tk::value_index best;
  float sum;
  float bins[RADIX_BINS];
};

// Shared memory of one block (dynamic: SharedPlan's bytes).
struct SampleShared {
  float hist[SAMPLE_WARPS * HIST_STRIDE];
  float merged[RADIX_BINS];
  float red_sum[SAMPLE_WARPS];
  tk::value_index red_arg[SAMPLE_WARPS];
  Partials part;
  int digit;
  float above;
};

__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < SAMPLE_WARPS; ++w) total += red[w];
  __syncthreads();
  return total;
}

__device__ __forceinline__ tk::value_index block_argmax(tk::value_index v, tk::value_index* red) {
  v = tk::warp_argmax(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  tk::value_index best = red[0];
  for (int w = 1; w < SAMPLE_WARPS; ++w)
    if (tk::beats(red[w], best)) best = red[w];
  __syncthreads();
  return best;
}

// The sum over the cluster's blocks (every thread of every block receives it, in the same order of ranks).
__device__ float cluster_sum(float v, SampleShared& sh, cg::cluster_group& cluster) {
  const float mine = block_sum(v, sh.red_sum);
  if (threadIdx.x == 0) sh.part.sum = mine;
  cluster.sync();
  float total = 0.f;
  for (int r = 0; r < CLUSTER_BLOCKS; ++r) total += cluster.map_shared_rank(&sh.part, r)->sum;
  cluster.sync();  // every block has read before any writes its partial again
  return total;
}

__device__ tk::value_index cluster_argmax(tk::value_index v, SampleShared& sh, cg::cluster_group& cluster) {
  const tk::value_index mine = block_argmax(v, sh.red_arg);
  if (threadIdx.x == 0) sh.part.best = mine;
  cluster.sync();
  tk::value_index best = cluster.map_shared_rank(&sh.part, 0)->best;
  for (int r = 1; r < CLUSTER_BLOCKS; ++r) {
    const tk::value_index o = cluster.map_shared_rank(&sh.part, r)->best;
    if (tk::beats(o, best)) best = o;
  }
  cluster.sync();
  return best;
}

}  // namespace mk::sampling
