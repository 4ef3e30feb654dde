// tile_epilogues.cuh: what TILE_MATMUL's QKV and GATE_UP tiles do with their products (ops/tile_matmul.cuh), shared by
// the narrow form (straight from the accumulators) and the wide one (tile_wide.cuh: from products staged in shared x).
#pragma once

#include "code_size.cuh"

#include "activations.cuh"
#include "state.cuh"
#include "tile_streams.cuh"

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

// GATE_UP: act_bf16[:, c] = silu(gate) * up for the tile's intermediate columns c from its products staged in shared
// memory ([tokens, stride] fp32; rows tile-interleaved: gu_tile gate rows, then their gu_tile up rows), two columns
// of one token per thread (cols is a multiple of 8).
__device__ __forceinline__ void tile_gate_up_act(const Globals& g, const TileOperands& t, const float* stage_out,
                                                 int stride) {
  const int tile = g.gu_tile, cols = t.rows / 2, c0 = t.row_begin / 2;
  const auto silu_up = [&](int i, int li) {
    const int gate_row = 2 * (li / tile) * tile + li % tile;
    const float gate = stage_out[i * stride + gate_row];
    return gate / (1.f + expf(-gate)) * stage_out[i * stride + gate_row + tile];
  };
  MK_ROLLED
  for (int idx = 2 * threadIdx.x; idx < t.tokens * cols; idx += 2 * CONSUMER_THREADS) {
    const int i = idx / cols, li = idx % cols;
    *reinterpret_cast<__nv_bfloat162*>(g.act_bf16 + (long long)(t.tok_begin + i) * g.intermediate + c0 + li) =
        __floats2bfloat162_rn(silu_up(i, li), silu_up(i, li + 1));
  }
}

}  // namespace mk::vm
