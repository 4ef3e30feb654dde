// tile_wide.cuh: a wide TILE_MATMUL tile (more than TILE_TOKENS tokens, up to TILE_WIDE_TOKENS; any kind but NORM):
// each warpgroup multiplies 64 of its tokens with all the page's rows (tile_matmul.cuh), then
// the products are staged in shared x ([tokens, rows + 4] fp32) and every kind's epilogue reads them from there.
//
// Why staged: a thread's 64 accumulators live through the page loop; an epilogue unrolled over them (QKV's RoPE and KV
// writes per row pair) on top made ptxas spill the interpreter loop's own state into local memory across other
// opcodes (attention's among them). Rolled loops over the staged products keep the wide form's registers to its
// page loop. The staging fits x: 128 tokens x 132 floats = 67.6 KB (engine/cuda/limits.py reserves it).
#pragma once

#include "code_size.cuh"

#include "../tk/atomics.cuh"
#include "state.cuh"
#include "tile_epilogues.cuh"
#include "tile_matmul.cuh"

namespace mk::vm {

// This thread's products into staged[token][row] (tokens and rows of the tile only).
__device__ __forceinline__ void tile_stage_products(const TileOperands& t, const TileLanes& tl,
                                                    const float (&acc)[TILE_N_BLOCKS<true>][4], float* staged,
                                                    int stride) {
  if (!tl.active) return;
  const int tq = tk::lane_id() & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = tl.tok0 + (tk::lane_id() >> 2) + 8 * half;
    if (i >= t.tokens) continue;
#pragma unroll
    for (int j = 0; j < TILE_N_BLOCKS<true>; ++j) {
      const int lr = 8 * j + 2 * tq;
      if (lr >= t.rows) break;
      *reinterpret_cast<float2*>(staged + i * stride + lr) = make_float2(acc[j][2 * half], acc[j][2 * half + 1]);
    }
  }
}

// LM_HEAD: the logits of the tile's rows, and each token's (max, first argmax) over them into lm_max / lm_arg[token,
// block]: a warp per token, a lane per 32nd row, ties to the first row.
__device__ __forceinline__ void tile_wide_lm_head(const Globals& g, const int* w, const TileOperands& t,
                                                  const float* staged, int stride) {
  const int lane = tk::lane_id(), block = w[W_OPERANDS + 7];
  MK_ROLLED
  for (int i = tk::warp_id(); i < t.tokens; i += NUM_CONSUMER_WARPS) {
    const long long tok = t.tok_begin + i;
    float v = -INFINITY;
    int r = 0x7fffffff;
    MK_ROLLED
    for (int row = lane; row < t.rows; row += 32) {
      const float x = staged[i * stride + row];
      g.logits[tok * g.vocab + t.row_begin + row] = x;
      if (x > v || (x == v && row < r)) v = x, r = row;  // the narrow form's rule (a first -inf row is taken)
    }
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) {
      const float ov = __shfl_xor_sync(tk::FULL_MASK, v, s);
      const int orow = __shfl_xor_sync(tk::FULL_MASK, r, s);
      if (ov > v || (ov == v && orow < r)) v = ov, r = orow;
    }
    if (lane == 0) {
      g.lm_max[tok * g.lm_blocks + block] = v;
      g.lm_arg[tok * g.lm_blocks + block] = t.row_begin + r;
    }
  }
}

// O, DOWN: the products added into the residual, four consecutive rows of one token per vector reduction.
__device__ __forceinline__ void tile_wide_add_residual(const Globals& g, const TileOperands& t, const float* staged,
                                                       int stride) {
  const int quads = t.rows / 4;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < t.tokens * quads; idx += CONSUMER_THREADS) {
    const int i = idx / quads, c = 4 * (idx % quads);
    const float4 v = *reinterpret_cast<const float4*>(staged + i * stride + c);
    tk::atomic_add_f32x4(g.hidden + (long long)(t.tok_begin + i) * g.hidden_size + t.row_begin + c, v);
  }
}

// QKV: RoPE and the q / paged-KV writes of every row pair (tile_epilogues.cuh): a lane keeps two row pairs (their
// places worked out once), a warp takes one token after another.
__device__ __forceinline__ void tile_wide_qkv(const Globals& g, const int* w, const TileOperands& t,
                                              const float* staged, int stride) {
  static_assert(TILE_WEIGHT_ROWS == 2 * 64, "a lane's two row pairs cover a tile's rows");
  const StepArgs sa(g);
  const int layer = w[W_LAYER], lr0 = 2 * tk::lane_id(), lr1 = lr0 + 64;
  const QkvPair r0(g, t.row_begin + min(lr0, t.rows - 2)), r1(g, t.row_begin + min(lr1, t.rows - 2));
  MK_ROLLED
  for (int i = tk::warp_id(); i < t.tokens; i += NUM_CONSUMER_WARPS) {
    const int tok = t.tok_begin + i;
    const QkvToken k(g, sa, layer, tok);
    const float* row = staged + i * stride;
    if (lr0 < t.rows) tile_qkv_write(g, r0, k, tok, row[lr0], row[lr0 + 1]);
    if (lr1 < t.rows) tile_qkv_write(g, r1, k, tok, row[lr1], row[lr1 + 1]);
  }
}

// The staged products' epilogue of the tile's kind (a tall tile's: one half of its rows at a time).
__device__ __forceinline__ void tile_wide_epilogue(const Globals& g, const int* w, const TileOperands& t,
                                                   const float* staged, int stride) {
  if (t.kind == TILE_QKV) {
    tile_wide_qkv(g, w, t, staged, stride);
  } else if (t.kind == TILE_GATE_UP) {
    tile_gate_up_act(g, t, staged, stride);
  } else if (t.kind == TILE_LM_HEAD) {
    tile_wide_lm_head(g, w, t, staged, stride);
  } else {  // O, DOWN
    tile_wide_add_residual(g, t, staged, stride);
  }
}

// A tall tile: both halves' products in registers through the page loop, then each half staged and finished in turn
// (x holds one half's products; the second half's accumulators wait in registers).
__device__ __forceinline__ bool tile_matmul_tall(const Globals& g, const Shared& sm, const int* w,
                                                 const TileOperands& t) {
  float* staged = sm.x;
  const int stride = TILE_WEIGHT_ROWS + 4;
  const TileLanes tl(tk::warp_id(), t);
  float acc[TILE_N_BLOCKS<true>][4], acc_hi[TILE_N_BLOCKS<true>][4];
  if (!tile_products<true, true, true>(g, sm, w, t, tl, acc, acc_hi)) return false;
  const TileOperands lo = t.rows_half(0), hi = t.rows_half(1);
  tile_stage_products(lo, tl, acc, staged, stride);
  consumer_sync();
  tile_wide_epilogue(g, w, lo, staged, stride);
  consumer_sync();  // the first half's products read: x takes the second's
  tile_stage_products(hi, tl, acc_hi, staged, stride);
  consumer_sync();
  tile_wide_epilogue(g, w, hi, staged, stride);
  return true;
}

__device__ __forceinline__ bool tile_matmul_wide(const Globals& g, const Shared& sm, const int* w,
                                                 const TileOperands& t) {
  static_assert(TILE_WIDE_TOKENS * (TILE_WEIGHT_ROWS + 4) <= X_FLOATS, "a wide tile's products fit x");
  float* staged = sm.x;  // free once every product is done (tile_products' last barrier)
  const int stride = t.rows + 4;  // rows padded: a warp's 8 tokens in different banks; 16-byte aligned rows
  {
    const TileLanes tl(tk::warp_id(), t);
    float acc[TILE_N_BLOCKS<true>][4];
    const bool ok = tile_takes_pairs(g, sm, t) ? tile_products<true, true>(g, sm, w, t, tl, acc, acc)
                                                : tile_products<true, false>(g, sm, w, t, tl, acc, acc);
    if (!ok) return false;
    tile_stage_products(t, tl, acc, staged, stride);
  }
  consumer_sync();
  tile_wide_epilogue(g, w, t, staged, stride);
  return true;
}

}  // namespace mk::vm
