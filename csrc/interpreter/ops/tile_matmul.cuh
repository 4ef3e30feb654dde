// ops/tile_matmul.cuh: TILE_MATMUL (engine/instructions/ops/tile_matmul.py), one tile of a layer's linear map for a
// chunk of the step's tokens on the tensor cores (the products: tile_matmul.cuh), and what each kind does with them.
#pragma once

#include "../code_size.cuh"

#include "../activations.cuh"
#include "../op_traits.cuh"
#include "../tile_epilogues.cuh"
#include "../tile_matmul.cuh"
#include "../tile_wide.cuh"

namespace mk::vm {

// LM_HEAD (narrow): each token's (max, first argmax) over the tile's rows into lm_max / lm_arg[token, block]: a lane's
// products, the four lanes of a token row, then the two warpgroups through shared out.
__device__ __forceinline__ bool tile_lm_argmax(const Globals& g, const Shared& sm, const int* w, const TileOperands& t,
                                               const TileLanes& tl, const float (&acc)[TILE_N_BLOCKS<false>][4]) {
  const int lane = tk::lane_id(), tq = lane & 3;
  float* best_val = sm.out;  // [warpgroup][token]
  int* best_row = reinterpret_cast<int*>(sm.out + 2 * TILE_TOKENS);
  if (tl.active) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float v = -INFINITY;
      int r = 0x7fffffff;
#pragma unroll
      for (int j = 0; j < TILE_N_BLOCKS<false>; ++j) {
        const int row = tl.row0 + 8 * j + 2 * tq;
        if (row >= t.rows) break;  // the page's rows past the tile's are not its matrix's
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = acc[j][2 * half + e];
          if (x > v || (x == v && row + e < r)) v = x, r = row + e;
        }
      }
#pragma unroll
      for (int s = 1; s <= 2; s <<= 1) {
        const float ov = __shfl_xor_sync(tk::FULL_MASK, v, s);
        const int orow = __shfl_xor_sync(tk::FULL_MASK, r, s);
        if (ov > v || (ov == v && orow < r)) v = ov, r = orow;
      }
      const int i = tl.tok0 + (lane >> 2) + 8 * half;
      if (tq == 0) {
        best_val[tl.wg * TILE_TOKENS + i] = v;
        best_row[tl.wg * TILE_TOKENS + i] = r;
      }
    }
  }
  consumer_sync();
  const int block = w[W_OPERANDS + 7];
  for (int i = threadIdx.x; i < t.tokens; i += CONSUMER_THREADS) {
    float v = best_val[i];
    int r = best_row[i];
    if (t.rows > 64 && best_val[TILE_TOKENS + i] > v) {  // the second warpgroup's rows come later: ties stay first
      v = best_val[TILE_TOKENS + i];
      r = best_row[TILE_TOKENS + i];
    }
    const long long at = (long long)(t.tok_begin + i) * g.lm_blocks + block;
    g.lm_max[at] = v;
    g.lm_arg[at] = t.row_begin + r;
  }
  return true;
}

// O, DOWN (narrow): the products added into the residual, four consecutive rows of one token per lane (one vector
// reduction): lanes 2m and 2m + 1 hold rows r, r + 1 and r + 2, r + 3 of tokens i and i + 8; they swap halves.
__device__ __forceinline__ void tile_add_residual(const Globals& g, const TileOperands& t, const TileLanes& tl,
                                                  const float (&acc)[TILE_N_BLOCKS<false>][4]) {
  const int lane = tk::lane_id(), tq = lane & 3;
  const bool odd = tq & 1;
  const int i = tl.tok0 + (lane >> 2) + (odd ? 8 : 0);
#pragma unroll
  for (int j = 0; j < TILE_N_BLOCKS<false>; ++j) {
    const int row = tl.row0 + 8 * j + 2 * (tq & 2);  // the pair's first row (whole warp: rows come in 16s)
    if (row >= t.rows) break;
    const float s0 = odd ? acc[j][0] : acc[j][2], s1 = odd ? acc[j][1] : acc[j][3];
    const float r0 = __shfl_xor_sync(tk::FULL_MASK, s0, 1), r1 = __shfl_xor_sync(tk::FULL_MASK, s1, 1);
    const float4 v = odd ? make_float4(r0, r1, acc[j][2], acc[j][3]) : make_float4(acc[j][0], acc[j][1], r0, r1);
    if (i < t.tokens)
      tk::atomic_add_f32x4(g.hidden + (long long)(t.tok_begin + i) * g.hidden_size + t.row_begin + row, v);
  }
}

// NORM: x_bf16 rows of the instruction's tokens = RMSNorm(hidden) with the norm its `block` operand names, in bf16
// (the tiles after it multiply it directly), with the matvec ops' norm arithmetic (activations.cuh rms_inv,
// x_layout.cuh scale4). The final norm's "tokens" are sequences: row s is sequence s's last live token (the LM head's
// tiles read one row per sequence, whatever the step's prompt chunks). All consumers take each token: every thread
// loads its TILE_NORM_VECS float4 of the row at once (a warp walking a 2048-wide row alone took 8 us per instruction,
// latency-bound). hidden was last written by other SMs' reductions this step: read through L2.
__device__ __forceinline__ bool op_tile_norm(const Globals& g, const Shared& sm, const int* w) {
  const TileOperands t(w);
  const int which = w[W_OPERANDS + 7], H4 = g.hidden_size / 4, tid = threadIdx.x;
  const bf16* weight = which == NORM_FINAL ? g.final_norm
                       : (which == NORM_ATTN ? g.attn_norm : g.mlp_norm) + (long long)w[W_LAYER] * g.hidden_size;
  const uint2* w4 = reinterpret_cast<const uint2*>(weight);  // four bf16
  const StepArgs sa(g);
  for (int i = 0; i < t.tokens; ++i) {
    const long long row = (long long)(t.tok_begin + i) * g.hidden_size;
    const long long src = which == NORM_FINAL ? (long long)(sa.live_end(t.tok_begin + i) - 1) * g.hidden_size
                                              : row;
    const float4* x = reinterpret_cast<const float4*>(g.hidden + src);
    float4 v[TILE_NORM_VECS];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < TILE_NORM_VECS; ++k) {
      const int c = tid + k * CONSUMER_THREADS;
      v[k] = c < H4 ? __ldcg(x + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) ss += __shfl_xor_sync(tk::FULL_MASK, ss, o);
    // the per-warp sums of rms_inv's row i % 2: two rows in turn, so no barrier is needed after the read
    if (tk::lane_id() == 0) sm.scratch[(i & 1) * NUM_CONSUMER_WARPS + tk::warp_id()] = ss;
    consumer_sync();
    const float inv = rms_inv(g, sm, i & 1);
#pragma unroll
    for (int k = 0; k < TILE_NORM_VECS; ++k) {
      const int c = tid + k * CONSUMER_THREADS;
      if (c >= H4) break;
      // the weights are loaded here, not with the row: both at once spilled (their registers on top of the row's)
      const float4 y = scale4(make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv), __ldg(w4 + c));
      store_x4(reinterpret_cast<float*>(g.x_bf16 + row), 4 * c, y, /*as_bf16=*/true);
    }
  }
  return true;
}

// A narrow QKV tile's epilogue from the accumulators: a thread's two tokens' places (QkvToken) once, then each of its
// row pairs' (QkvPair) once, against both tokens' products.
__device__ __forceinline__ void tile_qkv_narrow(const Globals& g, const int* w, const TileOperands& t,
                                                const TileLanes& tl, const float (&acc)[TILE_N_BLOCKS<false>][4]) {
  if (!tl.active) return;
  const StepArgs sa(g);
  const int tq = tk::lane_id() & 3, layer = w[W_LAYER], i0 = tl.tok0 + (tk::lane_id() >> 2);
  const bool has0 = i0 < t.tokens, has1 = i0 + 8 < t.tokens;
  const int tok0 = t.tok_begin + i0, tok1 = tok0 + 8;
  const QkvToken k0(g, sa, layer, has0 ? tok0 : t.tok_begin), k1(g, sa, layer, has1 ? tok1 : t.tok_begin);
#pragma unroll
  for (int j = 0; j < TILE_N_BLOCKS<false>; ++j) {
    const int lr = tl.row0 + 8 * j + 2 * tq;
    if (lr >= t.rows) break;
    const QkvPair r(g, t.row_begin + lr);
    if (has0) tile_qkv_write(g, r, k0, tok0, acc[j][0], acc[j][1]);
    if (has1) tile_qkv_write(g, r, k1, tok1, acc[j][2], acc[j][3]);
  }
}

// A narrow tile (tile_matmul.cuh): its products and its kind's epilogue straight from the accumulators.
__device__ __forceinline__ bool tile_matmul_narrow(const Globals& g, const Shared& sm, const int* w,
                                                   const TileOperands& t) {
  const TileLanes tl(tk::warp_id(), t);
  float acc[TILE_N_BLOCKS<false>][4];
  const int pack = tile_pack(g, t);
  const bool ok = pack == TILE_PACK_STEPS     ? tile_products_packed<TILE_PACK_STEPS>(g, sm, w, t, acc)
                  : pack == 2                 ? tile_products_packed<2>(g, sm, w, t, acc)
                  : tile_takes_pairs(g, sm, t) ? tile_products<false, true>(g, sm, w, t, tl, acc, acc)
                                               : tile_products<false, false>(g, sm, w, t, tl, acc, acc);
  if (!ok) return false;
  if (t.kind == TILE_O || t.kind == TILE_DOWN) {
    if (tl.active) tile_add_residual(g, t, tl, acc);
    return true;
  }
  if (t.kind == TILE_QKV) {
    tile_qkv_narrow(g, w, t, tl, acc);
    return true;
  }
  const int tq = tk::lane_id() & 3;
  float* stage_out = sm.x;  // GATE_UP: [tokens, rows + 4] (rows padded: a warp's 8 tokens in different banks)
  const int stride = t.rows + 4;
  if (tl.active) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = tl.tok0 + (tk::lane_id() >> 2) + 8 * half;
      if (i >= t.tokens) continue;
      const int tok = t.tok_begin + i;
#pragma unroll
      for (int j = 0; j < TILE_N_BLOCKS<false>; ++j) {
        const int lr = tl.row0 + 8 * j + 2 * tq;
        if (lr >= t.rows) break;
        const float x0 = acc[j][2 * half], x1 = acc[j][2 * half + 1];
        if (t.kind == TILE_GATE_UP) {
          *reinterpret_cast<float2*>(stage_out + i * stride + lr) = make_float2(x0, x1);
        } else {  // LM_HEAD
          *reinterpret_cast<float2*>(g.logits + (long long)tok * g.vocab + t.row_begin + lr) = make_float2(x0, x1);
        }
      }
    }
  }
  if (t.kind == TILE_LM_HEAD) return tile_lm_argmax(g, sm, w, t, tl, acc);
  if (t.kind != TILE_GATE_UP) return true;
  consumer_sync();
  tile_gate_up_act(g, t, stage_out, stride);
  return true;
}

// Inlined into the kernel: ptxas serialises the products of a wgmma pipeline it sees crossing a call (C7510). The
// general kernel's spills grow from 68/584 to 104/760 bytes (stores/loads) with narrow tiles; the batch-1 variants
// have no tiles. TALL: the kernel variant with tall tiles (VARIANT_TILES_TALL); in the others a tall tile is the
// host's mistake (engine/cuda/variant.py), recorded before any page is consumed.
template <bool TALL>
__device__ __forceinline__ bool op_tile_matmul(const Globals& g, const Shared sm, const int* w) {
  const TileOperands t(w);
  if (t.tokens == 0) return true;  // dead padding tokens only: no pages were streamed for it (skip_dead_tile)
  if (t.kind == TILE_NORM) return op_tile_norm(g, sm, w);
  if (t.tall()) {
    if constexpr (TALL) {
      return tile_matmul_tall(g, sm, w, t);
    } else {
      return variant_mismatch(g, w);
    }
  }
  return t.wide() ? tile_matmul_wide(g, sm, w, t) : tile_matmul_narrow(g, sm, w, t);
}

template <>
struct Op<OP_TILE_MATMUL> : OpTraits {
  static constexpr bool in_variant(int v) { return v == VARIANT_GENERAL; }
  // A tile's ring pages are its K steps, one page each (two where it is tall, a quarter or half where it is packed),
  // copied as boxes (tile_streams.cuh issue_tile_page): these words count them (pages of one 16 KiB "row") and point
  // at the tile's first weight.
  __device__ __forceinline__ static WeightStream weights(const Globals& g, const StreamInputs& in) {
    const int kind = in.a[0];
    const bf16* m = kind == TILE_QKV       ? g.w_qkv
                    : kind == TILE_O       ? g.w_o
                    : kind == TILE_GATE_UP ? g.w_gate_up
                    : kind == TILE_DOWN    ? g.w_down
                                           : g.lm_head;
    const long long K = kind == TILE_O ? in.Q : kind == TILE_DOWN ? in.I : in.H;
    const TileOperands t = TileOperands::of_operands(in.a);
    WeightStream s = matrix_rows(m, nullptr, max(in.layer, 0) * tile_layer_rows(g, kind) + in.a[1],
                                 (t.tall() ? 2 : 1) * t.k_steps / tile_pack(g, t), in.a[3], PAGE_BYTES / 2, K);
    s.row_stride = PAGE_BYTES / 2;
    return s;
  }
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared& sm, const int* w) {
    if constexpr (B1) {
      return variant_mismatch(g, w);
    } else {
      return op_tile_matmul<false>(g, sm, w);
    }
  }
};

}  // namespace mk::vm
