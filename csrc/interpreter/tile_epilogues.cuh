// tile_epilogues.cuh: what TILE_MATMUL's QKV and GATE_UP tiles do with their products (ops/tile_matmul.cuh), shared by
// the narrow form (straight from the accumulators) and the wide one (tile_wide.cuh: from products staged in shared x).
#pragma once

#include "code_size.cuh"

#include "activations.cuh"
#include "state.cuh"
#include "tile_streams.cuh"

namespace mk::vm {

// QKV: RoPE on q/k row pairs (an mma result holds rows 2i and 2i + 1 of a token together), q into q, k/v into the
// paged cache; the same arithmetic as RMS_QKV_ROPE_APPEND's epilogue. What depends on the row pair alone (QkvPair) and
// on the token alone (QkvToken) is worked out once each, not per (row pair, token): with per-product divisions by
// run-time values and the step-argument reads, a wide QKV tile's epilogue took 21 us of its 47 (1B, H200, a 2 048-token
// chunk; two warps per scheduler leave such a loop bound by its instruction count).

// Where packed row r of a layer's W_qkv goes: KV group grp, slot j of the group's G query heads, then its key (j == G)
// and its value (j == G + 1); p its first dim.
struct QkvPair {
  int grp, j, p;
  float inv_freq;  // RoPE's frequency of the pair (q and k rows)
  __device__ __forceinline__ QkvPair(const Globals& g, int r) {
    const int hd_log = 31 - __clz(g.head_dim);  // head_dim is a power of two here (the host checks)
    const int G2 = g.n_heads / g.n_kv + 2, head = r >> hd_log;
    grp = head / G2;
    j = head - grp * G2;
    p = r & (g.head_dim - 1);
    inv_freq = j < G2 - 1 ? g.rope_inv_freq[p / 2] : 0.f;
  }
};

// A token's rope position and its row of KV group 0 in the layer's paged cache (a group's row is group_stride on).
struct QkvToken {
  long long kv_base, group_stride;
  int pos;
  __device__ __forceinline__ QkvToken(const Globals& g, const StepArgs& sa, int layer, int tok) {
    const int ps = sa.page_size(), slot = sa.slot(tok);
    kv_base = (((long long)layer * g.kv_num_pages + slot / ps) * g.n_kv * ps + slot % ps) * g.head_dim;
    group_stride = (long long)ps * g.head_dim;
    pos = sa.position(tok);
  }
};

__device__ __forceinline__ void tile_qkv_write(const Globals& g, const QkvPair& r, const QkvToken& k, int tok,
                                               float x0, float x1) {
  const int hd = g.head_dim, G = g.n_heads / g.n_kv;
  const long long kv_row = k.kv_base + r.grp * k.group_stride;
  if (r.j <= G) {
    const int d = r.p / 2;
    float sn, cs;
    sincosf((float)k.pos * r.inv_freq, &sn, &cs);
    const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
    if (r.j < G) {
      float* qrow = g.q + (long long)tok * g.n_heads * hd + (r.grp * G + r.j) * hd;
      qrow[d] = y0;
      qrow[d + hd / 2] = y1;
    } else {
      g.k_cache[kv_row + d] = __float2bfloat16(y0);
      g.k_cache[kv_row + d + hd / 2] = __float2bfloat16(y1);
    }
  } else {
    g.v_cache[kv_row + r.p] = __float2bfloat16(x0);
    g.v_cache[kv_row + r.p + 1] = __float2bfloat16(x1);
  }
}

// GATE_UP: act_bf16[:, c] = silu(gate) * up for the tile's intermediate columns c from its products staged in shared
// memory ([tokens, stride] fp32; rows tile-interleaved: gu_tile gate rows, then their gu_tile up rows). A lane keeps
// two columns (their gate rows worked out once: divisions by the run-time gu_tile per product were most of this
// epilogue's 9 us in a wide tile), a warp takes one token after another.
__device__ __forceinline__ void tile_gate_up_act(const Globals& g, const TileOperands& t, const float* stage_out,
                                                 int stride) {
  static_assert(TILE_WEIGHT_ROWS / 2 == 2 * 32, "a warp's lanes cover a tile's columns, two each");
  const int tile = g.gu_tile, cols = t.rows / 2, li = 2 * tk::lane_id();
  if (li >= cols) return;
  const int ga = 2 * (li / tile) * tile + li % tile, gb = 2 * ((li + 1) / tile) * tile + (li + 1) % tile;
  const auto silu_up = [&](const float* row, int gate_row) {
    const float gate = row[gate_row];
    return gate / (1.f + expf(-gate)) * row[gate_row + tile];
  };
  bf16* out = g.act_bf16 + (long long)t.tok_begin * g.intermediate + t.row_begin / 2 + li;
#pragma unroll 4
  for (int i = tk::warp_id(); i < t.tokens; i += NUM_CONSUMER_WARPS) {
    const float* row = stage_out + i * stride;
    *reinterpret_cast<__nv_bfloat162*>(out + (long long)i * g.intermediate) =
        __floats2bfloat162_rn(silu_up(row, ga), silu_up(row, gb));
  }
}

}  // namespace mk::vm
