// sampling/cluster_reduce.cuh: the sampling kernel's shared memory and its block and cluster reductions. A block
// hands a partial result to others by writing it into their shared memory (a slot per sending rank) before a cluster
// barrier, so every read after the barrier is local: a block never waits on another to read its memory, and no
// barrier is needed before a block exits.
#pragma once

#include <cooperative_groups.h>

#include "../../tk/reduce.cuh"
#include "sampling_config.cuh"

namespace mk::sampling {

namespace cg = cooperative_groups;

struct Cand {  // a top-k candidate: its scaled logit and its token id
  float value;
  int index;
};

struct RowStat {  // a block's first-pass result
  tk::value_index best;  // the largest penalised logit (greedy's argmax)
  int bad;               // nonzero: a logit is not finite
  int pad;
};

struct CandMeta {  // what a block sent to block 0
  float cut;  // the scaled value of its bound of the k-th largest (-inf: none)
  int count;    // its candidates (more than CAND_PER_BLOCK: the row takes the radix passes)
};

// Shared memory of one block (the row's slice follows it).
struct alignas(16) SampleShared {
  union {
    float hist[SAMPLE_WARPS * HIST_STRIDE];     // whole-row radix passes: per-warp histograms
    Cand cand[CLUSTER_BLOCKS][CAND_PER_BLOCK];  // block 0: every block's top-k candidates, a region per rank
  };
  float bins[2][RADIX_BINS];       // block-local selection: one histogram is cleared while the other fills
  float part_bins[2][RADIX_BINS];  // whole-row radix passes: this block's histogram, read by the cluster
  float merged[RADIX_BINS];
  tk::value_index red_arg[SAMPLE_WARPS];
  RowStat stat[CLUSTER_BLOCKS];           // from every rank: the first pass
  CandMeta meta[CLUSTER_BLOCKS];          // from every rank: its candidates
  tk::value_index drawn[CLUSTER_BLOCKS];  // block 0, from every rank: its slice's draw
  int cand_count;                         // this block's candidates so far
  int digit;                              // the bin scan's result (scan_bins)
  float above, bin_weight, total, target;
};
static_assert(sizeof(SampleShared) % 16 == 0, "the slice after it is read as float4");

// Every thread receives the block's argmax (torch.argmax's tie rule).
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

// The first pass's exchange: every block's argmax and finiteness into every block's `stat`, in two halves so that a
// caller can work between them (`arrive_stats`, then `wait_stats`). The caller has waited on a cluster barrier that
// every block arrived at once it started (no block's shared memory is written before it runs).
__device__ __forceinline__ void arrive_stats(tk::value_index best, int bad, SampleShared& sh,
                                             cg::cluster_group& cluster) {
  if (threadIdx.x < CLUSTER_BLOCKS) {
    const int rank = static_cast<int>(cluster.block_rank());
    *cluster.map_shared_rank(&sh.stat[rank], static_cast<int>(threadIdx.x)) = RowStat{best, bad, 0};
  }
  __cluster_barrier_arrive();  // release: the stores above are seen by whoever waits
}

// The row's argmax and whether any logit was not finite; the same in every block (the same order of ranks).
__device__ __forceinline__ RowStat wait_stats(SampleShared& sh) {
  __cluster_barrier_wait();  // acquire
  RowStat row = sh.stat[0];
  for (int r = 1; r < CLUSTER_BLOCKS; ++r) {
    if (tk::beats(sh.stat[r].best, row.best)) row.best = sh.stat[r].best;
    row.bad |= sh.stat[r].bad;
  }
  return row;
}

// The cluster's argmax of one value per thread, received by block 0 (the others get their own block's).
__device__ tk::value_index argmax_to_leader(tk::value_index v, SampleShared& sh, cg::cluster_group& cluster) {
  const tk::value_index mine = block_argmax(v, sh.red_arg);
  const int rank = static_cast<int>(cluster.block_rank());
  if (threadIdx.x == 0) *cluster.map_shared_rank(&sh.drawn[rank], 0) = mine;
  cluster.sync();
  if (rank != 0) return mine;
  tk::value_index best = sh.drawn[0];
  for (int r = 1; r < CLUSTER_BLOCKS; ++r)
    if (tk::beats(sh.drawn[r], best)) best = sh.drawn[r];
  return best;
}

}  // namespace mk::sampling
