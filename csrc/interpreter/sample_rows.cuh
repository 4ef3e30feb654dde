// sample_rows.cuh: one sampling step over a batch of logits rows, right after a megakernel step, in one launch:
// penalties from device-resident counts, greedy, temperature, min-p, top-k, top-p and the Gumbel-max draw with
// counter-based noise. The same arithmetic as engine/sampling/filters.py (the CPU and torch path; a GPU test holds
// them together): the noise bits are identical, the float results within rounding. top-k and top-p thresholds
// come from radix selection over order-preserving keys of the scaled logits (count or probability-mass
// histograms), so no row is ever sorted. A row is spread over a cluster of CLUSTER_BLOCKS blocks (one slice of
// the vocabulary each): every pass over the row is that many times shorter, and the blocks combine their partial
// results through distributed shared memory.
#pragma once

#include <cooperative_groups.h>

#include <cfloat>
#include <cstdint>

#include "../tk/reduce.cuh"

namespace mk::sampling {

namespace cg = cooperative_groups;

inline constexpr int SAMPLE_THREADS = 512;
inline constexpr int SAMPLE_WARPS = SAMPLE_THREADS / 32;
inline constexpr int CLUSTER_BLOCKS = 8;  // the portable cluster size
inline constexpr int RADIX_BITS = 8;
inline constexpr int RADIX_BINS = 1 << RADIX_BITS;
inline constexpr int HIST_STRIDE = RADIX_BINS + 1;  // per-warp histograms one bank apart
static_assert(RADIX_BINS == 8 * 32, "the bin scan gives each lane of one warp 8 bins");
static_assert(32 % RADIX_BITS == 0, "the radix passes cover the 32-bit key exactly");

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
};

__device__ __forceinline__ uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// noise.row_hashes: the key's words and the counter hashed into one word per row and step.
__device__ __forceinline__ uint32_t row_hash(const SampleArgs& a, int s) {
  uint32_t h = mix32(static_cast<uint32_t>(a.counters[s] & 0xFFFFFFFFll));
  h = mix32(static_cast<uint32_t>(a.keys[2 * s + 1]) ^ h);
  return mix32(static_cast<uint32_t>(a.keys[2 * s]) ^ h);
}

// noise.gumbel: 23 bits of the token's hash as a uniform in (0, 1), exactly representable.
__device__ __forceinline__ float gumbel(uint32_t row, int v) {
  const uint32_t h = mix32(row ^ mix32(static_cast<uint32_t>(v)));
  const float u = (static_cast<float>(h >> 9) + 0.5f) * (1.0f / 8388608.0f);
  // The inner logarithm exact (u near 1 decides the likeliest draws); the outer one's argument is far from 1, where
  // the fast hardware logarithm is accurate to a few ulps.
  return -__logf(-logf(u));
}

// The noise lies in [-2.82, 16.64] (u is at least 2^-24 from 0 and 1), and the row's top token (scaled value 0) is
// always kept: a token whose scaled value is below -(16.64 + 2.82) can never win the draw, so it is not drawn.
inline constexpr float NEVER_WINS = -19.5f;

// Float order as unsigned order (-inf lowest).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

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
