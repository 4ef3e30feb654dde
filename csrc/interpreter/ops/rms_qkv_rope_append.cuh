// ops/rms_qkv_rope_append.cuh: RMS_QKV_ROPE_APPEND (engine/instructions/ops/rms_qkv_rope_append.py), a row
// block of the attention norm + QKV projection with RoPE, its K/V rows appended to the paged KV cache.
#pragma once

#include "../code_size.cuh"

#include "../activations.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"

namespace mk::vm {

// RMS_QKV_ROPE_APPEND: operands row_begin, row_end, kv_group, copy_begin, copy_end. Besides q and the
// KV append it copies hidden[:, copy_begin:copy_end) into mid (the fused ATTN_O_PROJ adds into mid).
template <bool B1>
__device__ bool op_qkv(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), layer = w[W_LAYER], row_begin = w[3], row_end = w[4], grp = w[5];
  const int copy_begin = w[6], n_copy = w[7] - w[6], H = g.hidden_size;
  const int hd = g.head_dim, G = g.n_heads / g.n_kv, group_rows = (G + 2) * hd, rows = row_end - row_begin;
  const int pairs = rows / 2, qcols = g.n_heads * hd, ps = sa.page_size();
  const int hd_log = 31 - __clz(hd);  // head_dim is 32, 64, 128 or 256 (the host checks): shifts, not divisions
  return for_each_token_group<B1>(g, T, [=, &g, &sm](const TokenGroup& tg) {
    const int t0 = tg.base, nt = tg.n;
    // The copied values are read with the norm's input (one round trip) and stored after it.
    const bool copy_one_pass = nt * n_copy <= CONSUMER_THREADS;
    float copied = 0.f;
    if (copy_one_pass && threadIdx.x < nt * n_copy) {
      const int2 ti = token_index<B1>(threadIdx.x, n_copy);
      copied = load_cg(g.hidden + (long long)(t0 + ti.x) * H + copy_begin + ti.y);
    }
    // The epilogue's global reads (step args, RoPE frequency) are issued before the norm and the matvec
    // when one pass covers every pair, so their latency hides behind that work.
    const bool preload = nt * pairs <= CONSUMER_THREADS;
    int pre_slot = 0, pre_pos = 0;
    float pre_freq = 0.f;
    if (preload && threadIdx.x < nt * pairs) {
      const int2 ti = token_index<B1>(threadIdx.x, pairs);
      const int t = t0 + ti.x, r = row_begin + 2 * ti.y;
      pre_slot = sa.slot(t);
      pre_pos = sa.position(t);
      if ((r % group_rows) >> hd_log <= G) pre_freq = g.rope_inv_freq[(r & (hd - 1)) / 2];
    }
    load_rows_rmsnorm<B1>(g, sm, g.hidden, nt, g.attn_norm + (long long)layer * g.hidden_size,
                          [&](int i) { return t0 + i; }, w);
    if (threadIdx.x == 0 && tg.pass.first) timing_mark(g, w, MARK_INPUT);
    MK_ROLLED
    for (int idx = threadIdx.x; idx < nt * n_copy; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, n_copy);
      const long long at = (long long)(t0 + ti.x) * H + copy_begin + ti.y;
      g.mid[at] = copy_one_pass ? copied : load_cg(g.hidden + at);
    }
    if (!matvec<B1>(g, sm, tg, w)) return false;
    MK_ROLLED
    for (int idx = threadIdx.x; idx < nt * pairs; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, pairs);
      const int i = ti.x, t = t0 + i, pr = ti.y;
      const int r = row_begin + 2 * pr;
      const int j = (r % group_rows) >> hd_log, p = r & (hd - 1);  // p is even: (p, p+1) is a packed pair
      const float inv = rms_inv(g, sm, i);  // the norm's scale, deferred to here (activations.cuh)
      const float x0 = sm.out[i * rows + 2 * pr] * inv, x1 = sm.out[i * rows + 2 * pr + 1] * inv;
      const int slot = preload ? pre_slot : sa.slot(t);
      const long long kv_row =
          ((((long long)layer * g.kv_num_pages + slot / ps) * g.n_kv + grp) * ps + slot % ps) * hd;
      if (j <= G) {  // q or k: rotate the pair, store at original dims i and i + hd/2
        const int d = p / 2;
        const float a = preload ? (float)pre_pos * pre_freq : (float)sa.position(t) * g.rope_inv_freq[d];
        float sn, cs;
        sincosf(a, &sn, &cs);
        const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
        if (j < G) {
          float* qrow = g.q + (long long)t * qcols + (grp * G + j) * hd;
          qrow[d] = y0;
          qrow[d + hd / 2] = y1;
        } else {
          g.k_cache[kv_row + d] = __float2bfloat16(y0);
          g.k_cache[kv_row + d + hd / 2] = __float2bfloat16(y1);
        }
      } else {  // v: stored unpermuted
        g.v_cache[kv_row + p] = __float2bfloat16(x0);
        g.v_cache[kv_row + p + 1] = __float2bfloat16(x1);
      }
    }
    return true;
  });
}

template <>
struct Op<OP_RMS_QKV_ROPE_APPEND> : OpTraits {
  static constexpr bool CHAIN = true;
  // W_qkv rows [row_begin, row_end) of the layer.
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    const long long qkv_rows = (long long)g.n_kv * (g.n_heads / g.n_kv + 2) * g.head_dim;
    return matrix_rows(g.w_qkv, g.w_qkv_scale, in.layer * qkv_rows + in.a[0], in.a[1] - in.a[0], 0, (int)in.H, in.H);
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_qkv<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
