// sampling/first_pass.cuh: the one pass over a row's slice in global memory: penalties (float64, clamped to float32's
// range, as engine/sampling/penalties.py), finiteness, the greedy argmax and each thread's two largest penalised
// logits (top-k's local bound), the penalised slice kept in shared memory for every later pass.
#pragma once

#include <cfloat>
#include <cstdint>

#include "../../tk/reduce.cuh"
#include "sampling_config.cuh"

namespace mk::sampling {

struct SliceStats {  // one thread's share of the first pass
  tk::value_index best{-INFINITY, 0x7FFFFFFF};
  int bad = 0;                            // a logit is not finite
  float top0 = -INFINITY, top1 = -INFINITY;  // its two largest penalised logits (-inf: none)
};

struct Penalty {
  double rep, freq, pres;
  __device__ __forceinline__ float apply(float l, int count, uint8_t seen) const {
    // A token neither in the prompt nor generated keeps its finite logit exactly (d - f * 0 - p * 0 == d for finite
    // f, p), and a non-finite one marks the row invalid whatever it becomes: most of a row skips the float64 work.
    if (count == 0 && seen == 0) return l;
    double d = l;
    if (seen) d = d > 0 ? d / rep : d * rep;
    d = d - freq * count - pres * (count > 0 ? 1.0 : 0.0);
    return static_cast<float>(fmin(fmax(d, -static_cast<double>(FLT_MAX)), static_cast<double>(FLT_MAX)));
  }
};

__device__ __forceinline__ void visit(SliceStats& st, float l, float y, int id) {
  if (!isfinite(l)) st.bad = 1;
  const tk::value_index cand{y, id};
  if (tk::beats(cand, st.best)) st.best = cand;
  const float lo = fminf(st.top0, y);
  st.top0 = fmaxf(st.top0, y);
  st.top1 = fmaxf(st.top1, lo);
}

// The slice [begin, begin + n) of row s into xs (penalised where PENALTIES). Each thread keeps BATCH loads in flight
// (float4 where the row's pointers allow it: the pass reads the row from global memory and waits on it).
template <bool PENALTIES>
__device__ SliceStats load_slice(const SampleArgs& a, int s, int begin, int n, float* xs) {
  constexpr int BATCH = PENALTIES ? 4 : 8;  // float4 loads per thread and round (the counts double the registers)
  const float* __restrict__ logits = a.logits + static_cast<long long>(s) * a.logits_stride + begin;
  const long long row = static_cast<long long>(s) * a.vocab + begin;
  const int* __restrict__ counts = PENALTIES ? a.counts + row : nullptr;
  const uint8_t* __restrict__ seen = PENALTIES ? a.seen + row : nullptr;
  const Penalty pen{a.repetition[s], a.frequency[s], a.presence[s]};
  SliceStats st;
  const bool vec = reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                   (!PENALTIES || (reinterpret_cast<uintptr_t>(counts) % 16 == 0 &&
                                   reinterpret_cast<uintptr_t>(seen) % 4 == 0));
  const int nv = vec ? n / 4 : 0;  // float4s; the rest one float at a time
  for (int base = threadIdx.x; base < nv; base += SAMPLE_THREADS * BATCH) {
    float4 l[BATCH];
    int4 c[BATCH];
    uint32_t seen4[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int q = base + u * SAMPLE_THREADS;
      if (q >= nv) break;
      l[u] = __ldg(reinterpret_cast<const float4*>(logits) + q);
      if constexpr (PENALTIES) {
        c[u] = reinterpret_cast<const int4*>(counts)[q];
        seen4[u] = reinterpret_cast<const uint32_t*>(seen)[q];
      }
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int q = base + u * SAMPLE_THREADS;
      if (q >= nv) break;
      const float lv[4] = {l[u].x, l[u].y, l[u].z, l[u].w};
      float y[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        y[j] = lv[j];
        if constexpr (PENALTIES) {
          const int cj = j == 0 ? c[u].x : j == 1 ? c[u].y : j == 2 ? c[u].z : c[u].w;
          y[j] = pen.apply(lv[j], cj, static_cast<uint8_t>(seen4[u] >> (8 * j)));
        }
        visit(st, lv[j], y[j], begin + 4 * q + j);
      }
      reinterpret_cast<float4*>(xs)[q] = make_float4(y[0], y[1], y[2], y[3]);
    }
  }
  for (int base = 4 * nv + threadIdx.x; base < n; base += SAMPLE_THREADS * BATCH) {
    float l[BATCH];
    int c[BATCH];
    uint8_t seen1[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = base + u * SAMPLE_THREADS;
      l[u] = i < n ? logits[i] : 0.f;
      c[u] = PENALTIES && i < n ? counts[i] : 0;
      seen1[u] = PENALTIES && i < n ? seen[i] : 0;
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = base + u * SAMPLE_THREADS;
      if (i >= n) break;
      const float y = PENALTIES ? pen.apply(l[u], c[u], seen1[u]) : l[u];
      visit(st, l[u], y, begin + i);
      xs[i] = y;
    }
  }
  return st;
}

}  // namespace mk::sampling
