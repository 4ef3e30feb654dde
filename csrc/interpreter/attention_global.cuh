// attention_global.cuh: split-KV decode/prefill attention with its keys read from the paged KV cache in
// global memory (online softmax in fp32, one warp per strided subset of keys, merged through shared memory):
// the `attend` core of ATTN_PARTIAL (ops/attn_partial.cuh) and ATTN_O_PROJ (ops/attn_o_proj.cuh) wherever
// their keys do not come through the page ring (attention_ring.cuh).
#pragma once

#include "code_size.cuh"

#include "attention_math.cuh"
#include "marks.cuh"
#include "state.cuh"

namespace mk::vm {

inline constexpr int ATTN_TABLE_MAX = 4096;  // block-table entries cached per split (the rest read from global)

// Keys first, first + NUM_CONSUMER_WARPS, ... (KEYS_PER_STEP<DPL> of them) of one KV group into registers,
// lane-owned dims; keys at or past `end` read nothing and come back as zeros. `table` caches the
// block-table entries from page `page_lo` on (table_cap of them; the rest come from global).
template <int DPL>
__device__ __forceinline__ void load_keys(const Globals& g, const int* table, int table_cap, const StepArgs& sa, int s, int layer,
                                          int grp, int page_lo, int first, int end, float (&kd)[KEYS_PER_STEP<DPL>][DPL],
                                          float (&vd)[KEYS_PER_STEP<DPL>][DPL]) {
  const int ps = sa.page_size(), hd = g.head_dim, lane = tk::lane_id();
#pragma unroll
  for (int u = 0; u < KEYS_PER_STEP<DPL>; ++u) {
    const int j = first + u * NUM_CONSUMER_WARPS;
    if (j < end) {
      const int pi = j / ps - page_lo;
      const int page = pi < table_cap ? table[pi] : sa.block(s, j / ps);
      const long long row = ((((long long)layer * g.kv_num_pages + page) * g.n_kv + grp) * ps + j % ps) * hd;
      load_head_dims<DPL>(g.k_cache + row + lane * DPL, kd[u]);
      load_head_dims<DPL>(g.v_cache + row + lane * DPL, vd[u]);
    } else {
#pragma unroll
      for (int d = 0; d < DPL; ++d) kd[u][d] = vd[u][d] = 0.f;
    }
  }
}
// Shared x during attention: merge [warp][head][hd + 2] (o, m, l), the queries [head][hd], then as many
// block-table entries as fit (at most ATTN_TABLE_MAX; the rest are read from global). The host checks
// attn_scratch_floats(NH, hd) + 1 <= x (engine/cuda/limits.py).
__host__ __device__ constexpr int attn_scratch_floats(int heads, int hd) {
  return NUM_CONSUMER_WARPS * heads * (hd + 2) + heads * hd;
}
static_assert(attn_scratch_floats(MAX_GQA, 128) + ATTN_TABLE_MAX <= X_FLOATS,
              "attention scratch of a full group must fit in x at the smallest ring");

// One attention task: sequence `seq`, KV group `grp`, its heads [h_begin, h_end) (within the group),
// over split `split` of `nsplit` of the sequence's KV pages, for part `q_part` of `q_parts` of its new tokens
// (the sequence's queries cut as n * k / q_parts: a long prompt chunk's attention spread over SMs).
struct AttnTask {
  int seq, grp, split, nsplit, h_begin, h_end, q_part = 0, q_parts = 1;
};

// Causal attention of `task` for each of the sequence's new tokens. `emit(t, h, d, out, lse)` receives
// every output element (token t, head h of the task, dim d) with its head's log-sum-exp; it runs
// between two consumer barriers, so it may write shared memory that the next token does not touch.
// MARKS: record the attention sub-phase marks (off when the caller is a fused op with its own).
template <int DPL, bool MARKS, typename Emit>
__device__ void attend(const Globals& g, const Shared& sm, const int* w, const AttnTask& task, Emit emit) {
  const StepArgs sa(g);
  const int layer = w[W_LAYER], s = task.seq, grp = task.grp, split = task.split, nsplit = task.nsplit;
  const int hd = g.head_dim, qcols = g.n_heads * hd, ps = sa.page_size();
  // This task's heads: NH of them, the first being global head `head0` (its group's first + h_begin).
  const int head0 = grp * (g.n_heads / g.n_kv) + task.h_begin, NH = task.h_end - task.h_begin;
  // Global reads cost ≈1-2 µs each while other SMs saturate HBM, and attention sits on every layer's
  // critical path: independent reads are issued together (context length and query range here, the
  // position with the queries below) rather than one behind the other.
  const int C = sa.context_len(s), seq_first = sa.query_start(s), nq = sa.live_end(s) - seq_first;
  const int q_first = seq_first + nq * task.q_part / task.q_parts, q_last = seq_first + nq * (task.q_part + 1) / task.q_parts;
  const int P = (C + ps - 1) / ps;
  const int key_begin = (split * P / nsplit) * ps, key_end = min(((split + 1) * P / nsplit) * ps, C);
  const int warp = tk::warp_id(), lane = tk::lane_id();
  const float scale = attn_scale(g);
  const int stride_h = hd + 2, stride_w = NH * stride_h;
  float* merge = sm.x;  // [warp][h][hd + 2]: o[hd], m, l
  float* q_sh = sm.x + NUM_CONSUMER_WARPS * stride_w;  // [h][hd]: this token's queries (shared: saves registers)
  // This split's block-table entries, read once into shared memory together with the queries (below),
  // so no key load waits behind a block-table load.
  int* table = reinterpret_cast<int*>(q_sh + NH * hd);
  const int table_cap = min(ATTN_TABLE_MAX, sm.x_floats - attn_scratch_floats(NH, hd));
  const int page_lo = key_begin / ps, n_table = min(table_cap, (key_end + ps - 1) / ps - page_lo);
  MK_ROLLED
  for (int i = threadIdx.x; i < n_table; i += CONSUMER_THREADS) table[i] = sa.block(s, page_lo + i);
  for (int t = q_first; t < q_last; ++t) {
    const int position = sa.position(t);
    MK_ROLLED
    for (int i = threadIdx.x; i < NH * hd; i += CONSUMER_THREADS)
      q_sh[i] = load_cg(g.q + (long long)t * qcols + head0 * hd + i);
    consumer_sync();
    if (MARKS && threadIdx.x == 0 && t == q_first) timing_mark(g, w, MARK_INPUT);
    const int kend = min(key_end, position + 1);
    reset_merge_slot<DPL>(merge + warp * stride_w, NH, hd);
    // KEYS_PER_STEP<DPL> keys per warp per step; the next step's keys and values are loaded before this
    // step's math, so the loop pays one global round trip in total rather than one per step.
    constexpr int STEP = KEYS_PER_STEP<DPL> * NUM_CONSUMER_WARPS;
    float kd[KEYS_PER_STEP<DPL>][DPL], vd[KEYS_PER_STEP<DPL>][DPL];
    load_keys<DPL>(g, table, table_cap, sa, s, layer, grp, page_lo, key_begin + warp, kend, kd, vd);
    for (int j0 = key_begin; j0 < kend; j0 += STEP) {
      float kn[KEYS_PER_STEP<DPL>][DPL], vn[KEYS_PER_STEP<DPL>][DPL];
      load_keys<DPL>(g, table, table_cap, sa, s, layer, grp, page_lo, j0 + STEP + warp, kend, kn, vn);
      bool valid[KEYS_PER_STEP<DPL>];
#pragma unroll
      for (int u = 0; u < KEYS_PER_STEP<DPL>; ++u) valid[u] = j0 + u * NUM_CONSUMER_WARPS + warp < kend;
      fold_keys<DPL, KEYS_PER_STEP<DPL>>(merge + warp * stride_w, q_sh, NH, hd, scale, kd, vd, valid);
#pragma unroll
      for (int u = 0; u < KEYS_PER_STEP<DPL>; ++u)
#pragma unroll
        for (int d = 0; d < DPL; ++d) { kd[u][d] = kn[u][d]; vd[u][d] = vn[u][d]; }
    }
    if (MARKS && threadIdx.x == 0 && t == q_first) timing_mark(g, w, MARK_LAST_PAGE);
    consumer_sync();
    if (MARKS && threadIdx.x == 0 && t == q_first) timing_mark(g, w, MARK_COMPUTED);
    merge_warp_states(merge, NH, hd, t, emit);
    consumer_sync();
  }
}

}  // namespace mk::vm
