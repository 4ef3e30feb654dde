// sampling/sample_rows.cuh: one sampling step over a batch of logits rows, right after a megakernel step, in one launch:
// penalties from device-resident counts, greedy, temperature, min-p, top-k, top-p and the Gumbel-max draw with
// counter-based noise. The same arithmetic as engine/sampling/filters.py (the CPU and torch path; a GPU test holds
// them together): the noise bits are identical, the float results within rounding. top-k and top-p thresholds
// come from radix selection over order-preserving keys of the scaled logits (count or probability-mass
// histograms), so no row is ever sorted. A row is spread over a cluster of CLUSTER_BLOCKS blocks (one slice of
// the vocabulary each): every pass over the row is that many times shorter, and the blocks combine their partial
// results through distributed shared memory.
#pragma once

#include <cfloat>
#include <cstdint>

#include "cluster_reduce.cuh"
#include "radix_select.cuh"
#include "sampling_config.cuh"
#include "sampling_noise.cuh"

namespace mk::sampling {

// Shared memory of one block: SampleShared, then its slice of the row (the passes after the first read it there,
// not from global memory).
__host__ __device__ constexpr size_t sample_smem_bytes(int vocab) {
  return sizeof(SampleShared) + sizeof(float) * static_cast<size_t>((vocab + CLUSTER_BLOCKS - 1) / CLUSTER_BLOCKS);
}
inline constexpr size_t SAMPLE_SMEM_LIMIT = 227 * 1024;  // sm_90's opt-in maximum per block
// The largest vocabulary whose slices fit shared memory (larger ones sample through the torch ops).
inline constexpr int SAMPLE_MAX_VOCAB =
    static_cast<int>((SAMPLE_SMEM_LIMIT - sizeof(SampleShared)) / sizeof(float)) * CLUSTER_BLOCKS;
inline constexpr int LOAD_BATCH = 8;  // independent global loads in flight per thread in the first pass

// A cluster of CLUSTER_BLOCKS blocks per row (grid: rows * CLUSTER_BLOCKS blocks); dynamic shared memory:
// sample_smem_bytes(vocab).
__global__ void __cluster_dims__(CLUSTER_BLOCKS, 1, 1) __launch_bounds__(SAMPLE_THREADS, 1)
    sample_rows(const SampleArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SampleShared& sh = *reinterpret_cast<SampleShared*>(smem_raw);
  float* xs = reinterpret_cast<float*>(smem_raw + sizeof(SampleShared));
  cg::cluster_group cluster = cg::this_cluster();
  const int s = blockIdx.x / CLUSTER_BLOCKS, rank = static_cast<int>(cluster.block_rank()), V = a.vocab;
  const int slice = (V + CLUSTER_BLOCKS - 1) / CLUSTER_BLOCKS;
  const int begin = min(V, rank * slice), n = min(V, begin + slice) - begin;
  const float* __restrict__ logits = a.logits + static_cast<long long>(s) * a.logits_stride + begin;
  const int* __restrict__ counts = a.counts ? a.counts + static_cast<long long>(s) * V + begin : nullptr;
  const uint8_t* __restrict__ seen = a.seen ? a.seen + static_cast<long long>(s) * V + begin : nullptr;

  // Penalties (float64, clamped to float32's range), finiteness, and the greedy argmax; LOAD_BATCH loads in
  // flight per thread, since this pass reads the row from global memory.
  const double rep = a.repetition[s], freq = a.frequency[s], pres = a.presence[s];
  float bad = 0.f;
  tk::value_index best{-INFINITY, 0x7FFFFFFF};
  for (int base = threadIdx.x; base < n; base += SAMPLE_THREADS * LOAD_BATCH) {
    float l[LOAD_BATCH];
    int c[LOAD_BATCH];
    uint8_t seen_u[LOAD_BATCH];
#pragma unroll
    for (int u = 0; u < LOAD_BATCH; ++u) {
      const int i = base + u * SAMPLE_THREADS;
      l[u] = i < n ? logits[i] : 0.f;
      c[u] = counts && i < n ? counts[i] : 0;
      seen_u[u] = seen && i < n ? seen[i] : 0;
    }
#pragma unroll
    for (int u = 0; u < LOAD_BATCH; ++u) {
      const int i = base + u * SAMPLE_THREADS;
      if (i >= n) break;
      if (!isfinite(l[u])) bad = 1.f;
      float y = l[u];
      if (counts) {
        double d = l[u];
        if (seen_u[u]) d = d > 0 ? d / rep : d * rep;
        d = d - freq * c[u] - pres * (c[u] > 0 ? 1.0 : 0.0);
        y = static_cast<float>(fmin(fmax(d, -static_cast<double>(FLT_MAX)), static_cast<double>(FLT_MAX)));
      }
      xs[i] = y;
      const tk::value_index cand{y, begin + i};
      if (tk::beats(cand, best)) best = cand;
    }
  }
  const bool valid = cluster_sum(bad, sh, cluster) == 0.f;  // its barriers also publish xs to the block
  best = cluster_argmax(best, sh, cluster);
  int id = best.index;
  if (valid && !a.greedy[s]) {  // uniform over the cluster: every block follows the same path
    filter_slice(xs, n, best.value, a.temperature[s], a.log_min_p[s]);
    RowView r{xs, 0u, begin, n};
    const int64_t k = a.top_k[s];
    if (k > 0) r.min_key = select_key<false>(r, static_cast<float>(k), sh, cluster);
    if (a.top_p[s] < 1.f) {
      float z = 0.f;  // the mass top-k kept, for top-p's target
      for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
        const float f = r.filtered(i);
        if (order_key(f) >= r.min_key) z += expf(f);
      }
      z = cluster_sum(z, sh, cluster);
      r.min_key = max(r.min_key, select_key<true>(r, a.top_p[s] * z, sh, cluster));
    }
    const uint32_t row = row_hash(a, s);
    tk::value_index draw{-INFINITY, 0x7FFFFFFF};
    for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
      const float f = r.filtered(i);
      if (f < NEVER_WINS || order_key(f) < r.min_key) continue;
      const tk::value_index cand{f + gumbel(row, begin + i), begin + i};
      if (tk::beats(cand, draw)) draw = cand;
    }
    id = cluster_argmax(draw, sh, cluster).index;
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
  }
}

}  // namespace mk::sampling
