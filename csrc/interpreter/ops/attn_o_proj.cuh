// ops/attn_o_proj.cuh: ATTN_O_PROJ (engine/instructions/ops/attn_o_proj.py), batch-1 attention fused with its
// slice of the O-projection.
//
// Why: as separate ops, attention (32 tiny instructions) and O-proj (128 instructions of 64 KB) each
// pay a full dependency hop — wait, input read, epilogue fence — while the O-proj bytes are only ≈2 µs
// of streaming. Here each instruction computes the attention of a few heads (repeated once per row chunk)
// and multiplies it by the matching columns of W_o for a chunk of rows. On a decode step the loader has
// already streamed both into the ring during the previous ops: the group's earlier keys (kv_stream.cuh),
// then the W_o slice, as panel pages where it is 64-256 columns wide (panel_pages.cuh). The result is added
// atomically into both residual copies: `mid` (read by gate/up) and `hidden` (the next layer's input,
// which the down-projection then accumulates into). The QKV ops initialised mid = hidden for this
// (their copy operands), and every QKV of the layer precedes this op (it adds into what they read).
#pragma once

#include "../code_size.cuh"

#include "../activations.cuh"
#include "../attention_global.cuh"
#include "../attention_ring.cuh"
#include "../consumer_matvec.cuh"
#include "../op_traits.cuh"
#include "../panel_pages.cuh"

namespace mk::vm {

// ATTN_O_PROJ: operands seq, kv_group, head_begin, head_end (within the group), row_begin, row_end.
template <int DPL, bool B1>
__device__ bool attn_o_proj(const Globals& g, const Shared& sm, const int* w) {
  const StepArgs sa(g);
  const AttnTask task{w[3], w[4], 0, 1, w[5], w[6]};
  const int hd = g.head_dim, K = (task.h_end - task.h_begin) * hd, H = g.hidden_size;
  const int row_begin = w[7], rows = w[8] - w[7];
  const int q_first = sa.query_start(task.seq), nq = sa.live_end(task.seq) - q_first;
  // The attention output [token][K] is staged in `out` (x holds the attention scratch), then moved to
  // x as the matvec's input rows. The host checks nq * max(K, rows) <= OUT_FLOATS (limits.py).
  float* staged = sm.out;
  const auto emit = [=](int t, int h, int d, float out, float) { staged[(t - q_first) * K + h * hd + d] = out; };
  if (w[W_SLOT_KV_MODE]) {  // one new token: its earlier keys came through the ring, ahead of the W_o pages
    if (!attend_ring<DPL>(g, sm, w, emit)) return false;
    consumer_sync();  // every head's output staged
  } else if constexpr (B1) {
    return variant_mismatch(g, w);
  } else {
    attend<DPL, false>(g, sm, w, task, emit);
  }
  const bool panels = panel_stream(g, w);
  const bool x_bf16 = panels || x_is_bf16(g, nq, K);  // as the page math reads x (activations.cuh)
  const bool x_f16 = !panels && x_is_f16(g, nq, K, w);
  const int pitch = x_pitch(nq, K, x_bf16 && !panels);
  MK_ROLLED
  for (int i = threadIdx.x; i < nq * K; i += CONSUMER_THREADS)
    store_x1(sm.x, pitch == K ? i : i / K * pitch + i % K, sm.out[i], x_bf16, x_f16);
  consumer_sync();
  if (threadIdx.x == 0) timing_mark(g, w, MARK_INPUT);
  // Panel pages (one-token steps) or row copies: the loader made the same choice (panel_stream).
  if (!(panels ? consume_panel_pages(g, sm, w) : matvec<B1>(g, sm, TokenGroup{0, nq, ONLY_PASS}, w))) return false;
  float* mid = g.mid + (long long)q_first * H + row_begin;
  float* hidden = g.hidden + (long long)q_first * H + row_begin;
  if (rows % 4 == 0 && row_begin % 4 == 0 && H % 4 == 0) {  // one vector RED per 4 rows
    const int quads = rows / 4;
    MK_ROLLED
    for (int idx = threadIdx.x; idx < nq * quads; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, quads);
      const int t = ti.x, r = 4 * ti.y;
      const float* o = sm.out + t * rows + r;
      const float4 v = make_float4(o[0], o[1], o[2], o[3]);
      tk::atomic_add_f32x4(mid + (long long)t * H + r, v);
      tk::atomic_add_f32x4(hidden + (long long)t * H + r, v);
    }
  } else {
    MK_ROLLED
    for (int idx = threadIdx.x; idx < nq * rows; idx += CONSUMER_THREADS) {
      const int2 ti = token_index<B1>(idx, rows);
      const int t = ti.x, r = ti.y;
      tk::atomic_add_f32(mid + (long long)t * H + r, sm.out[t * rows + r]);
      tk::atomic_add_f32(hidden + (long long)t * H + r, sm.out[t * rows + r]);
    }
  }
  return true;
}

template <bool B1>
__device__ __forceinline__ bool op_attn_o_proj(const Globals& g, const Shared& sm, const int* w) {
  if (g.head_dim == 64) return attn_o_proj<2, B1>(g, sm, w);
  if (g.head_dim == 128) return attn_o_proj<4, B1>(g, sm, w);
  if constexpr (!B1) {  // the batch-1 variants hold head dims up to 128: a fourth path spilled their registers
    if (g.head_dim == 256) return attn_o_proj<8, B1>(g, sm, w);
  }
  return attn_o_proj<1, B1>(g, sm, w);  // head_dim 32 (the host stores others in one of these: head_padding.py)
}

template <>
struct Op<OP_ATTN_O_PROJ> : OpTraits {
  static constexpr bool in_variant(int v) { return v != VARIANT_BATCH1_SPLIT; }
  static constexpr bool CHAIN = true;
  // W_o columns of heads [head_begin, head_end) of the group, rows [row_begin, row_end) of the layer.
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    const long long head0 = (long long)in.a[1] * (g.n_heads / g.n_kv) + in.a[2];
    return matrix_rows(g.w_o, g.w_o_scale, in.layer * in.H + in.a[4], in.a[5] - in.a[4], head0 * g.head_dim,
                       (in.a[3] - in.a[2]) * g.head_dim, in.Q);
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    return op_attn_o_proj<B1>(g, sm, w);
  }
};

}  // namespace mk::vm
