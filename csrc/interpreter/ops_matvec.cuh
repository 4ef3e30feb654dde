// ops_matvec.cuh: the weight-streaming opcodes. Each loads its activations into shared x (after the
// dependency waits), runs the ring matvec into shared out, then applies its epilogue to global memory.
#pragma once

#include "code_size.cuh"

#include "../tk/reduce.cuh"
#include "activations.cuh"
#include "consumer_matvec.cuh"

namespace mk::vm {

// The weight-streaming MLP ops and the LM head, once their input is in shared memory: the timing mark, and
// the loader back to its streaming cap (it kept the low one while the input was read: low_cap_inputs).
__device__ __forceinline__ void streamed_input_ready(const Globals& g, const Shared& sm, const int* w) {
  if (threadIdx.x == 0) {
    timing_mark(g, w, MARK_INPUT);
    set_low_cap_from(sm, NO_LOW_CAP);
  }
}

// RMS_QKV_ROPE_APPEND: operands row_begin, row_end, kv_group, copy_begin, copy_end. Besides q and the
// KV append it copies hidden[:, copy_begin:copy_end) into mid (the fused ATTN_O_PROJ adds into mid).
template <bool B1>
__device__ bool op_qkv(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), layer = w[W_LAYER], row_begin = w[3], row_end = w[4], grp = w[5];
  const int copy_begin = w[6], n_copy = w[7] - w[6], H = g.hidden_size;
  // The copied values are read with the norm's input (one round trip) and stored after it.
  const bool copy_one_pass = T * n_copy <= CONSUMER_THREADS;
  float copied = 0.f;
  if (copy_one_pass && threadIdx.x < T * n_copy) {
    const int2 ti = token_index<B1>(threadIdx.x, n_copy);
    copied = load_cg(g.hidden + (long long)ti.x * H + copy_begin + ti.y);
  }
  const int hd = g.head_dim, G = g.n_heads / g.n_kv, group_rows = (G + 2) * hd, rows = row_end - row_begin;
  const int pairs = rows / 2, qcols = g.n_heads * hd, ps = sa.page_size();
  const int hd_log = 31 - __clz(hd);  // head_dim is 32, 64 or 128 (the host checks): shifts, not divisions
  // The epilogue's global reads (step args, RoPE frequency) are issued before the norm and the matvec
  // when one pass covers every pair, so their latency hides behind that work.
  const bool preload = T * pairs <= CONSUMER_THREADS;
  int pre_slot = 0, pre_pos = 0;
  float pre_freq = 0.f;
  if (preload && threadIdx.x < T * pairs) {
    const int2 ti = token_index<B1>(threadIdx.x, pairs);
    const int t = ti.x, r = row_begin + 2 * ti.y;
    pre_slot = sa.slot(t);
    pre_pos = sa.position(t);
    if ((r % group_rows) >> hd_log <= G) pre_freq = g.rope_inv_freq[(r & (hd - 1)) / 2];
  }
  load_rows_rmsnorm(g, sm, g.hidden, T, g.attn_norm + (long long)layer * g.hidden_size, [](int i) { return i; });
  if (threadIdx.x == 0) timing_mark(g, w, MARK_INPUT);
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * n_copy; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, n_copy);
    const long long at = (long long)ti.x * H + copy_begin + ti.y;
    g.mid[at] = copy_one_pass ? copied : load_cg(g.hidden + at);
  }
  if (!matvec<B1>(g, sm, T, w)) return false;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * pairs; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, pairs);
    const int t = ti.x, pr = ti.y;
    const int r = row_begin + 2 * pr;
    const int j = (r % group_rows) >> hd_log, p = r & (hd - 1);  // p is even: (p, p+1) is a packed pair
    const float inv = rms_inv(g, sm, t);  // the norm's scale, deferred to here (activations.cuh)
    const float x0 = sm.out[t * rows + 2 * pr] * inv, x1 = sm.out[t * rows + 2 * pr + 1] * inv;
    const int slot = preload ? pre_slot : sa.slot(t);
    const long long kv_row = ((((long long)layer * g.kv_num_pages + slot / ps) * g.n_kv + grp) * ps + slot % ps) * hd;
    if (j <= G) {  // q or k: rotate the pair, store at original dims i and i + hd/2
      const int i = p / 2;
      const float a = preload ? (float)pre_pos * pre_freq : (float)sa.position(t) * g.rope_inv_freq[i];
      float s, c;
      sincosf(a, &s, &c);
      const float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
      if (j < G) {
        float* qrow = g.q + (long long)t * qcols + (grp * G + j) * hd;
        qrow[i] = y0;
        qrow[i + hd / 2] = y1;
      } else {
        g.k_cache[kv_row + i] = __float2bfloat16(y0);
        g.k_cache[kv_row + i + hd / 2] = __float2bfloat16(y1);
      }
    } else {  // v: stored unpermuted
      g.v_cache[kv_row + p] = __float2bfloat16(x0);
      g.v_cache[kv_row + p + 1] = __float2bfloat16(x1);
    }
  }
  return true;
}

// O_PROJ_RESIDUAL: operands row_begin, row_end. mid = hidden + attn·Wo^T; hidden = mid.
template <bool B1>
__device__ bool op_o_proj(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), row_begin = w[3], rows = w[4] - w[3], Q = g.n_heads * g.head_dim;
  // The residual is read before the matvec when one pass covers it (its latency hides behind the work).
  const bool preload = T * rows <= CONSUMER_THREADS;
  float resid = 0.f;
  if (preload && threadIdx.x < T * rows)
    resid = load_cg(g.hidden + (long long)(threadIdx.x / rows) * g.hidden_size + row_begin + threadIdx.x % rows);
  load_rows(g, sm, g.attn_out, Q, 0, T, Q, [](int i) { return i; });
  if (threadIdx.x == 0) timing_mark(g, w, MARK_INPUT);
  if (!matvec<B1>(g, sm, T, w)) return false;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * rows; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, rows);
    const int t = ti.x, r = ti.y;
    const long long at = (long long)t * g.hidden_size + row_begin + r;
    const float m = (preload ? resid : load_cg(g.hidden + at)) + sm.out[t * rows + r];
    g.mid[at] = m;
    g.hidden[at] = m;
  }
  return true;
}

// RMS_GATE_UP_SILU: operands i_begin, i_end, slice. act = silu(gate) * up over tile-interleaved rows.
template <bool B1>
__device__ bool op_gate_up(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), layer = w[W_LAYER], i_begin = w[3], n = w[4] - w[3];
  load_rows_rmsnorm(g, sm, g.mid, T, g.mlp_norm + (long long)layer * g.hidden_size, [](int i) { return i; });
  streamed_input_ready(g, sm, w);
  if (!matvec<B1>(g, sm, T, w)) return false;
  const int tile = g.gu_tile, rows = 2 * n;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * n; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, n);
    const int t = ti.x, li = ti.y;  // li: index relative to i_begin (a multiple of tile)
    const int gate_row = 2 * (li / tile) * tile + li % tile;
    const float inv = rms_inv(g, sm, t);  // the norm's scale, deferred to here (activations.cuh)
    const float gate = sm.out[t * rows + gate_row] * inv, up = sm.out[t * rows + gate_row + tile] * inv;
    g.act[(long long)t * g.intermediate + i_begin + li] = gate / (1.f + expf(-gate)) * up;
  }
  return true;
}

// DOWN_RESIDUAL: operands row_begin, row_end, k_begin, k_end, slice. hidden += act[:, k]·Wd[:, k]^T.
template <bool B1>
__device__ bool op_down(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int T = B1 ? 1 : sa.num_tokens(), row_begin = w[3], rows = w[4] - w[3], k_begin = w[5], K = w[6] - w[5];
  load_rows(g, sm, g.act, g.intermediate, k_begin, T, K, [](int i) { return i; });
  streamed_input_ready(g, sm, w);
  if (!matvec<B1>(g, sm, T, w)) return false;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * rows; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, rows);
    const int t = ti.x, r = ti.y;
    tk::atomic_add_f32(g.hidden + (long long)t * g.hidden_size + row_begin + r, sm.out[t * rows + r]);
  }
  return true;
}

// LM_HEAD: operands v_begin, v_end, block. Logits of each sequence's last token + block argmax.
template <bool B1>
__device__ bool op_lm_head(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const int S = B1 ? 1 : sa.num_seqs(), v_begin = w[3], rows = w[4] - w[3], block = w[5];
  load_rows_rmsnorm(g, sm, g.hidden, S, g.final_norm, [&](int s) { return sa.query_start(s + 1) - 1; });
  streamed_input_ready(g, sm, w);
  if (!matvec<B1>(g, sm, S, w)) return false;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < S * rows; idx += CONSUMER_THREADS) {
    const int2 ti = token_index<B1>(idx, rows);
    const int s = ti.x, r = ti.y;
    g.logits[(long long)s * g.vocab + v_begin + r] = sm.out[s * rows + r] * rms_inv(g, sm, s);
  }
  const int warp = tk::warp_id(), lane = tk::lane_id();
  for (int s = warp; s < S; s += NUM_CONSUMER_WARPS) {
    const float inv = rms_inv(g, sm, s);
    tk::value_index best{-INFINITY, 0x7fffffff};
    for (int r = lane; r < rows; r += 32) {
      const tk::value_index c{sm.out[s * rows + r] * inv, v_begin + r};  // as stored in logits
      if (tk::beats(c, best)) best = c;
    }
    best = tk::warp_argmax(best);
    if (lane == 0) {
      g.lm_max[s * g.lm_blocks + block] = best.value;
      g.lm_arg[s * g.lm_blocks + block] = best.index;
    }
  }
  return true;
}

}  // namespace mk::vm
