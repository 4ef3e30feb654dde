// ops_attention.cuh: split-KV decode/prefill attention over the paged KV cache (online softmax in
// fp32, one warp per strided subset of keys, merged through shared memory) and the LSE reduction.
#pragma once

#include "code_size.cuh"

#include "../tk/reduce.cuh"
#include "advance.cuh"
#include "attention_math.cuh"
#include "bf16_unpack.cuh"
#include "ops_attention_ring.cuh"
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
// over split `split` of `nsplit` of the sequence's KV pages.
struct AttnTask {
  int seq, grp, split, nsplit, h_begin, h_end;
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
  const int C = sa.context_len(s), q_first = sa.query_start(s), q_last = sa.query_start(s + 1);
  const int P = (C + ps - 1) / ps;
  const int key_begin = (split * P / nsplit) * ps, key_end = min(((split + 1) * P / nsplit) * ps, C);
  const int warp = tk::warp_id(), lane = tk::lane_id();
  const float scale = 1.0f / sqrtf((float)hd);
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

// Where ATTN_PARTIAL's outputs go: attn_out with one split, else this split's o_part / lse_part rows.
__device__ __forceinline__ auto partial_output(const Globals& g, const int* w) {
  const int grp = w[4], split = w[5], nsplit = w[6], hd = g.head_dim, qcols = g.n_heads * hd;
  const int T = StepArgs(g).num_tokens(), head0 = grp * (g.n_heads / g.n_kv) + w[7];
  return [=, &g](int t, int h, int d, float out, float lse) {
    const int head = head0 + h;
    if (nsplit == 1) {
      g.attn_out[(long long)t * qcols + head * hd + d] = out;
    } else {
      g.o_part[((long long)split * T + t) * qcols + head * hd + d] = out;
      if (d == 0) g.lse_part[((long long)split * T + t) * g.n_heads + head] = lse;
    }
  };
}

// ATTN_PARTIAL: operands seq, kv_group, split, num_splits, head_begin, head_end (heads within the group).
// One new token whose earlier keys the controller put on the page ring (kv_stream.cuh) takes the ring
// path; anything else (prefill chunks, the knob off) reads its keys from global memory.
template <int DPL, bool B1>
__device__ bool attn_partial(const Globals& g, const Shared& sm, const int* w) {
  if (w[W_SLOT_KV_MODE]) return attend_ring<DPL>(g, sm, w, partial_output(g, w));
  if constexpr (B1) {
    return variant_mismatch(g, w);
  } else {
    const AttnTask task{w[3], w[4], w[5], w[6], w[7], w[8]};
    attend<DPL, true>(g, sm, w, task, partial_output(g, w));
    return true;
  }
}

template <bool B1>
__device__ __forceinline__ bool op_attn_partial(const Globals& g, const Shared& sm, const int* w) {
  if (g.head_dim == 64) return attn_partial<2, B1>(g, sm, w);
  if (g.head_dim == 128) return attn_partial<4, B1>(g, sm, w);
  return attn_partial<1, B1>(g, sm, w);  // head_dim 32 (the host rejects anything else)
}

// ATTN_REDUCE: operands seq, kv_group, num_splits. out = Σ_k e^{lse_k - M} o_k / Σ_k e^{lse_k - M}.
__device__ void op_attn_reduce(const Globals& g, const int* w) {
  const StepArgs sa(g);
  const int s = w[3], grp = w[4], nsplit = w[5], hd = g.head_dim, G = g.n_heads / g.n_kv;
  const int T = sa.num_tokens(), qcols = g.n_heads * hd, q0 = sa.query_start(s), nq = sa.query_start(s + 1) - q0;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < nq * G * hd; idx += CONSUMER_THREADS) {
    const int t = q0 + idx / (G * hd), h = (idx / hd) % G, d = idx % hd, head = grp * G + h;
    float M = -INFINITY;
    for (int k = 0; k < nsplit; ++k) M = fmaxf(M, load_cg(g.lse_part + ((long long)k * T + t) * g.n_heads + head));
    float num = 0.f, den = 0.f;
    for (int k = 0; k < nsplit; ++k) {
      const float f = expf(load_cg(g.lse_part + ((long long)k * T + t) * g.n_heads + head) - M);
      den += f;
      num = fmaf(f, load_cg(g.o_part + ((long long)k * T + t) * qcols + head * hd + d), num);
    }
    g.attn_out[(long long)t * qcols + head * hd + d] = num / den;
  }
}

// EMBED: operands tok_begin, tok_end. hidden[t] = embed[token_ids[t]] (fp32).
__device__ void op_embed(const Globals& g, const int* w) {
  const StepArgs sa(g);
  const int H = g.hidden_size, t0 = w[3], n = w[4] - w[3];
  for (int idx = threadIdx.x; idx < n * H; idx += CONSUMER_THREADS) {
    const int t = t0 + idx / H, k = idx % H;
    g.hidden[(long long)t * H + k] = __bfloat162float(g.embed[(long long)sa.token_id(t) * H + k]);
  }
}

// The next step's hidden rows from the ids in shared `out` ([S] ints): hidden[s] = embed[id s] (fp32; decode:
// sequence s is token s of the next step). Every consumer thread takes 8 columns (one 16-byte load), so a batch-1
// row is one round trip; the host folds the embedding only where hidden_size % 8 == 0.
__device__ __forceinline__ void write_next_embeddings(const Globals& g, const Shared& sm, int S) {
  const int H = g.hidden_size, chunks = H / 8;
  const int* ids = reinterpret_cast<const int*>(sm.out);
  MK_ROLLED
  for (int idx = threadIdx.x; idx < S * chunks; idx += CONSUMER_THREADS) {
    const int s = idx / chunks, c = idx % chunks;
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(g.embed + (long long)ids[s] * H) + c);  // read-only weights
    float f[8];
    bf16x8_to_float(v, f);
    float4* dst = reinterpret_cast<float4*>(g.hidden + (long long)s * H) + 2 * c;
    dst[0] = make_float4(f[0], f[1], f[2], f[3]);
    dst[1] = make_float4(f[4], f[5], f[6], f[7]);
  }
}

// ARGMAX_REDUCE: operand num_blocks. out_tokens[s] = argmax over the LM-head blocks (ties: smallest id).
__device__ void op_argmax(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int S = sa.num_seqs(), nb = w[3], warp = tk::warp_id(), lane = tk::lane_id();
  for (int s = warp; s < S; s += NUM_CONSUMER_WARPS) {
    tk::value_index best{-INFINITY, 0x7fffffff};
    for (int b = lane; b < nb; b += 32) {
      const tk::value_index c{load_cg(g.lm_max + s * g.lm_blocks + b), __ldcg(g.lm_arg + s * g.lm_blocks + b)};
      if (tk::beats(c, best)) best = c;
    }
    best = tk::warp_argmax(best);
    if (lane == 0) {
      g.out_tokens[s] = best.index;
      // The on-device decode loop's next inputs: every reader of step_args in this step is an ancestor.
      if (g.advance_history) advance_sequence(const_cast<int*>(g.step_args), s, best.index, g.advance_history, g.error);
      reinterpret_cast<int*>(sm.out)[s] = best.index;  // for the embedding rows below (S <= tokens <= OUT_FLOATS)
    }
  }
  // ... and their embedding rows, where the next step has no EMBED: every reader of hidden in this step (the LM
  // head's norm) is an ancestor too.
  if (g.advance_history && g.embed_next) {
    consumer_sync();
    write_next_embeddings(g, sm, S);
  }
}

}  // namespace mk::vm
