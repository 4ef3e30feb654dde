// sampling/sample_rows.cuh: one sampling step over a batch of logits rows, right after a megakernel step, in one launch:
// penalties from device-resident counts, greedy, temperature, min-p, top-k, top-p and the Gumbel-max draw with
// counter-based noise. The same arithmetic as engine/sampling/filters.py (the CPU and torch path; a GPU test holds
// them together): the noise bits are identical, the float results within rounding. No row is ever sorted. A row is
// spread over a cluster of CLUSTER_BLOCKS blocks (one slice of the vocabulary each, kept in shared memory after the
// one read from global memory); the blocks combine partial results through distributed shared memory, and each
// exchange costs a cluster barrier, so the paths are built to need few:
//   greedy                         first pass, 1 barrier (the row's argmax)
//   temperature / min-p            + one scaled draw pass, 1 barrier
//   top-k <= FAST_TOP_K (+ top-p)  + a candidate pass, 1 barrier; block 0 finishes alone (topk_finish.cuh)
//   top-p alone, larger top-k      + radix passes over the whole row, 1 barrier each, + the draw, 1 barrier
// In an on-device decode loop (SampleArgs::step_args) the thread that writes a row's id also advances the row's
// step args, as the advance kernel would after this one (../advance.cuh): one launch per sampled step, not two.
#pragma once

#include <cstdint>

#include "../../tk/grid_dependency.cuh"
#include "../advance.cuh"
#include "../run_stop.cuh"
#include "block_select.cuh"
#include "cluster_reduce.cuh"
#include "first_pass.cuh"
#include "radix_select.cuh"
#include "sampling_config.cuh"
#include "sampling_noise.cuh"
#include "topk_candidates.cuh"
#include "topk_finish.cuh"

namespace mk::sampling {

// Shared memory of one block: SampleShared, then its slice of the row.
__host__ __device__ constexpr size_t sample_smem_bytes(int vocab) {
  return sizeof(SampleShared) + sizeof(float) * static_cast<size_t>(slice_len(vocab));
}
inline constexpr size_t SAMPLE_SMEM_LIMIT = 227 * 1024;  // sm_90's opt-in maximum per block
// The largest vocabulary whose slices fit shared memory (larger ones sample through the torch ops).
inline constexpr int SAMPLE_MAX_VOCAB =
    static_cast<int>((SAMPLE_SMEM_LIMIT - sizeof(SampleShared)) / sizeof(float)) / SLICE_ALIGN * SLICE_ALIGN *
    CLUSTER_BLOCKS;
static_assert(sample_smem_bytes(SAMPLE_MAX_VOCAB) <= SAMPLE_SMEM_LIMIT);

// This block's share of the draw over its slice: SCALED, xs holds scaled logits (filter_slice) and keys below
// min_key are dropped; else xs holds penalised logits, scaled here (no other filter) where they may reach NEVER_WINS.
template <bool SCALED>
__device__ tk::value_index draw_slice(const float* xs, int n, int begin, uint32_t row, uint32_t min_key, float ymax,
                                      float temperature, float log_min_p) {
  const float ylo = SCALED ? -INFINITY : scaled_floor(NEVER_WINS, ymax, temperature);
  tk::value_index draw{-INFINITY, 0x7FFFFFFF};
  for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
    if (!SCALED && xs[i] < ylo) continue;  // scales below NEVER_WINS: the division is not needed to know it
    const float f = SCALED ? xs[i] : scaled_logit(xs[i], ymax, temperature, log_min_p);
    if (f < NEVER_WINS || order_key(f) < min_key) continue;
    const tk::value_index cand{f + gumbel(row, begin + i), begin + i};
    if (tk::beats(cand, draw)) draw = cand;
  }
  return draw;
}

// A cluster of CLUSTER_BLOCKS blocks per row (grid: rows * CLUSTER_BLOCKS blocks); dynamic shared memory:
// sample_smem_bytes(vocab).
__global__ void __cluster_dims__(CLUSTER_BLOCKS, 1, 1) __launch_bounds__(SAMPLE_THREADS, 1)
    sample_rows(const SampleArgs a) {
  // Launched with PDL (after a megakernel step that lets its dependents launch at its start), the blocks take SMs
  // as the step's blocks exit and wait here for it to finish; everything below reads what it or earlier launches
  // wrote. Letting the next step launch now puts its blocks on the SMs this launch leaves free, where they wait
  // for it in turn (every block of this launch is resident by then: no block of it waits for their SMs).
  tk::allow_dependent_grids();
  tk::wait_prerequisite_grids();
  // A step of a run whose rows all stopped at an earlier step: nothing to draw (the word was written by an earlier
  // launch, so every block of every cluster decides the same, before any barrier).
  if (mk::vm::run_stopped_before(a.run_stop, a.run_step)) return;
  // Arrive now and wait before the first write into another block's shared memory: a block may be written only
  // once it runs, and by the end of the first pass every block has long arrived (the wait costs nothing).
  __cluster_barrier_arrive_relaxed();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SampleShared& sh = *reinterpret_cast<SampleShared*>(smem_raw);
  float* xs = reinterpret_cast<float*>(smem_raw + sizeof(SampleShared));
  cg::cluster_group cluster = cg::this_cluster();
  const int s = blockIdx.x / CLUSTER_BLOCKS, rank = static_cast<int>(cluster.block_rank()), V = a.vocab;
  const int slice = slice_len(V);
  const int begin = min(V, rank * slice), n = min(V, begin + slice) - begin;
  if (threadIdx.x == 0) sh.cand_count = 0;
  const bool greedy = a.greedy[s] != 0;
  const int64_t top_k = a.top_k[s];
  const float top_p = a.top_p[s];
  const bool fast = !greedy && top_k > 0 && top_k <= FAST_TOP_K;
  const int k = static_cast<int>(top_k > 0 ? top_k : 0);  // below the vocabulary size (tensors.py)

  const SliceStats st = a.counts ? load_slice<true>(a, s, begin, n, xs) : load_slice<false>(a, s, begin, n, xs);
  const int bad = __syncthreads_or(st.bad);
  const tk::value_index best = block_argmax(st.best, sh.red_arg);  // its barriers also publish xs to the block
  __cluster_barrier_wait();
  arrive_stats(best, bad, sh, cluster);
  // While the row's max travels: the local bound of top-k's k-th largest (penalised logits: the scaling is monotone).
  const float bound = fast ? local_kth_bound(st.top0, st.top1, k, sh) : -INFINITY;
  const RowStat row_stat = wait_stats(sh);
  const bool valid = row_stat.bad == 0;
  int id = row_stat.best.index;

  if (valid && !greedy) {  // uniform over the cluster: every block follows the same path
    const float ymax = row_stat.best.value, temperature = a.temperature[s], log_min_p = a.log_min_p[s];
    bool radix = !fast;
    if (fast) {
      const float cut = bound > -INFINITY ? scaled_logit(bound, ymax, temperature, log_min_p) : -INFINITY;
      // A bound dropped by min-p leaves the block fewer than k tokens: it sends every token min-p keeps.
      const int sent = send_candidates(xs, n, begin, ymax, temperature, log_min_p,
                                       cut > -INFINITY ? cut : log_min_p, sh, cluster);
      if (threadIdx.x < CLUSTER_BLOCKS) *cluster.map_shared_rank(&sh.meta[rank], threadIdx.x) = CandMeta{cut, sent};
      cluster.sync();
      for (int r = 0; r < CLUSTER_BLOCKS; ++r) radix |= sh.meta[r].count > CAND_PER_BLOCK;
      if (!radix) {
        if (rank != 0) return;  // block 0 finishes from its own shared memory
        id = finish_top_k(a, s, k, top_p, sh);
      }
    }
    if (radix) {
      const uint32_t row = row_hash(a, s);
      tk::value_index draw;
      if (k > 0 || top_p < 1.f) {
        filter_slice(xs, n, ymax, temperature, log_min_p);
        RowView r{xs, 0u, begin, n};
        if (k > 0) r.min_key = select_key<false>(r, static_cast<float>(k), sh, cluster);
        if (top_p < 1.f) r.min_key = max(r.min_key, select_key<true>(r, top_p, sh, cluster));
        draw = draw_slice<true>(xs, n, begin, row, r.min_key, ymax, temperature, log_min_p);
      } else {
        draw = draw_slice<false>(xs, n, begin, row, 0u, ymax, temperature, log_min_p);
      }
      id = argmax_to_leader(draw, sh, cluster).index;
    }
  }
  if (rank == 0 && threadIdx.x == 0) {
    if (!valid) id = 0;
    a.out_ids[s] = id;
    a.out_valid[s] = valid ? 1 : 0;
    a.counters[s] += 1;
    if (a.counts && valid) {
      a.counts[static_cast<long long>(s) * V + id] += 1;
      a.seen[static_cast<long long>(s) * V + id] = 1;
    }
    // The advance kernel's work (advance_decode), for this row: every reader of the step args in the step has
    // finished (the step did, before this launch read its logits), and the next step reads them only after this
    // launch ends.
    if (a.step_args && !mk::vm::step_failed(a.step_error)) {
      mk::vm::advance_step_args(a.step_args, s, id, a.step_error);
      if (a.run_stop) mk::vm::note_run_token(a.run_stop, s, id, a.run_step);
    }
  }
}

}  // namespace mk::sampling
