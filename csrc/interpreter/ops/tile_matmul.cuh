// ops/tile_matmul.cuh: TILE_MATMUL (engine/instructions/ops/tile_matmul.py), one tile of a layer's linear map for a
// chunk of the step's tokens on the tensor cores (the products: tile_matmul.cuh), and what each kind does with them.
#pragma once

#include "../code_size.cuh"

#include "../op_traits.cuh"
#include "../tile_matmul.cuh"

namespace mk::vm {

// QKV: RoPE on q/k row pairs (an mma result holds rows 2i and 2i + 1 of a token together), q into q, k/v into the
// paged cache; the same arithmetic as RMS_QKV_ROPE_APPEND's epilogue.
__device__ __forceinline__ void tile_qkv_pair(const Globals& g, const StepArgs& sa, int layer, int r, int tok, float x0,
                                              float x1) {
  const int hd = g.head_dim, G = g.n_heads / g.n_kv, group_rows = (G + 2) * hd, ps = sa.page_size();
  const int hd_log = 31 - __clz(hd);  // head_dim is a power of two here (the host checks)
  const int grp = r / group_rows, j = (r % group_rows) >> hd_log, p = r & (hd - 1);
  const int slot = sa.slot(tok);
  const long long kv_row = ((((long long)layer * g.kv_num_pages + slot / ps) * g.n_kv + grp) * ps + slot % ps) * hd;
  if (j <= G) {
    const int d = p / 2;
    float sn, cs;
    sincosf((float)sa.position(tok) * g.rope_inv_freq[d], &sn, &cs);
    const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
    if (j < G) {
      float* qrow = g.q + (long long)tok * g.n_heads * hd + (grp * G + j) * hd;
      qrow[d] = y0;
      qrow[d + hd / 2] = y1;
    } else {
      g.k_cache[kv_row + d] = __float2bfloat16(y0);
      g.k_cache[kv_row + d + hd / 2] = __float2bfloat16(y1);
    }
  } else {
    g.v_cache[kv_row + p] = __float2bfloat16(x0);
    g.v_cache[kv_row + p + 1] = __float2bfloat16(x1);
  }
}

// f(m, half, i) for each token row of this lane's products (tile_products' acc[m][n][2 * half + e]): the tile's token
// i = 16 (m0 + m * mstep) + lane / 4 + 8 half, for the token blocks this warp has.
template <typename F>
__device__ __forceinline__ void for_each_acc_token(int m0, int mstep, int mt, F&& f) {
  const int gq = tk::lane_id() >> 2;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int mb = m0 + m * mstep;
    if (mb >= mt) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) f(m, half, mb * 16 + gq + 8 * half);
  }
}

// LM_HEAD: each token's (max, first argmax) over the tile's rows into lm_max / lm_arg[token, block]: a lane's four
// products, the four lanes of a token row, then the warps of its row blocks through shared out (past the norm's sums).
__device__ __forceinline__ bool tile_lm_argmax(const Globals& g, const Shared& sm, const int* w, const TileOperands& t,
                                               const float (&acc)[4][2][4], int row0, int m0, int mstep) {
  const int warp = tk::warp_id(), tq = tk::lane_id() & 3, mt = (t.tokens + 15) / 16;
  float* best_val = sm.out + 4 * TILE_TOKENS;  // [warp][token]
  int* best_row = reinterpret_cast<int*>(sm.out + (4 + NUM_CONSUMER_WARPS) * TILE_TOKENS);
  for_each_acc_token(m0, mstep, mt, [&](int m, int half, int i) {
    float v = -INFINITY;
    int r = 0x7fffffff;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = acc[m][n][2 * half + e];  // the norm's scale is positive: the order is the same
        const int row = row0 + 8 * n + 2 * tq + e;
        if (x > v || (x == v && row < r)) v = x, r = row;
      }
#pragma unroll
    for (int s = 1; s <= 2; s <<= 1) {
      const float ov = __shfl_xor_sync(tk::FULL_MASK, v, s);
      const int orow = __shfl_xor_sync(tk::FULL_MASK, r, s);
      if (ov > v || (ov == v && orow < r)) v = ov, r = orow;
    }
    if (tq == 0) {
      best_val[warp * TILE_TOKENS + i] = v;
      best_row[warp * TILE_TOKENS + i] = r;
    }
  });
  consumer_sync();
  const int nrg = t.rows / 16, per_rg = NUM_CONSUMER_WARPS / nrg, block = w[W_OPERANDS + 7];
  for (int i = threadIdx.x; i < t.tokens; i += CONSUMER_THREADS) {
    const int first = ((i / 16) % per_rg) * nrg;  // the warps of token i's block, in row order
    float v = best_val[first * TILE_TOKENS + i];
    int r = best_row[first * TILE_TOKENS + i];
    for (int k = 1; k < nrg; ++k) {
      const float ov = best_val[(first + k) * TILE_TOKENS + i];
      if (ov > v) v = ov, r = best_row[(first + k) * TILE_TOKENS + i];
    }
    const long long at = (long long)(t.tok_begin + i) * g.lm_blocks + block;
    g.lm_max[at] = v * tile_rms_inv(g, sm, i);
    g.lm_arg[at] = t.row_begin + r;
  }
  return true;
}

__device__ __noinline__ bool op_tile_matmul(const Globals& g, const Shared sm, const int* w) {
  const TileOperands t(w);
  float acc[4][2][4];
  int row0, m0, mstep;
  if (!tile_products(g, sm, w, t, acc, row0, m0, mstep)) return false;
  const StepArgs sa(g);
  const int tq = tk::lane_id() & 3, mt = (t.tokens + 15) / 16, layer = w[W_LAYER];
  float* stage_out = sm.x;  // GATE_UP: [tokens, rows], the x stages' room (their copies have all landed)
  for_each_acc_token(m0, mstep, mt, [&](int m, int half, int i) {
    if (i >= t.tokens) return;
    const int tok = t.tok_begin + i;
    const float inv = t.normalised() ? tile_rms_inv(g, sm, i) : 1.f;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int lr = row0 + 8 * n + 2 * tq;
      const float x0 = acc[m][n][2 * half] * inv, x1 = acc[m][n][2 * half + 1] * inv;
      if (t.kind == TILE_QKV) {
        tile_qkv_pair(g, sa, layer, t.row_begin + lr, tok, x0, x1);
      } else if (t.kind == TILE_GATE_UP) {
        stage_out[i * t.rows + lr] = x0;
        stage_out[i * t.rows + lr + 1] = x1;
      } else if (t.kind == TILE_LM_HEAD) {
        *reinterpret_cast<float2*>(g.logits + (long long)tok * g.vocab + t.row_begin + lr) = make_float2(x0, x1);
      } else {  // O, DOWN: into the residual
        float* h = g.hidden + (long long)tok * g.hidden_size + t.row_begin + lr;
        atomicAdd(h, x0);
        atomicAdd(h + 1, x1);
      }
    }
  });
  if (t.kind == TILE_LM_HEAD) return tile_lm_argmax(g, sm, w, t, acc, row0, m0, mstep);
  if (t.kind != TILE_GATE_UP) return true;
  consumer_sync();
  // act[:, c] = silu(gate) * up for the tile's intermediate columns c (rows tile-interleaved: gu_tile gate rows, then
  // their gu_tile up rows)
  const int tile = g.gu_tile, cols = t.rows / 2, c0 = t.row_begin / 2;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < t.tokens * cols; idx += CONSUMER_THREADS) {
    const int i = idx / cols, li = idx % cols;
    const int gate_row = 2 * (li / tile) * tile + li % tile;
    const float gate = stage_out[i * t.rows + gate_row], up = stage_out[i * t.rows + gate_row + tile];
    g.act[(long long)(t.tok_begin + i) * g.intermediate + c0 + li] = gate / (1.f + expf(-gate)) * up;
  }
  return true;
}

template <>
struct Op<OP_TILE_MATMUL> : OpTraits {
  static constexpr bool in_variant(int v) { return v == VARIANT_GENERAL; }
  // A tile's ring pages are its K steps, one page each, copied as boxes (tile_matmul.cuh issue_tile_page): these
  // words count them (pages of one 16 KiB "row") and point at the tile's first weight.
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    const int kind = in.a[0];
    const bf16* m = kind == TILE_QKV       ? g.w_qkv
                    : kind == TILE_O       ? g.w_o
                    : kind == TILE_GATE_UP ? g.w_gate_up
                    : kind == TILE_DOWN    ? g.w_down
                                           : g.lm_head;
    const long long K = kind == TILE_O ? in.Q : kind == TILE_DOWN ? in.I : in.H;
    WeightStream s = matrix_rows(m, nullptr, max(in.layer, 0) * tile_layer_rows(g, kind) + in.a[1],
                                 (in.a[4] - in.a[3]) / TILE_K, in.a[3], PAGE_BYTES / 2, K);
    s.row_stride = PAGE_BYTES / 2;
    return s;
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    if constexpr (B1) {
      return variant_mismatch(g, w);
    } else {
      return op_tile_matmul(g, sm, w);
    }
  }
};

}  // namespace mk::vm
