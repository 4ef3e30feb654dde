// attention_pass.cuh: one warp folds a whole pass of keys (32 / DPL of them) that sit in shared memory
// into its running (o, m, l) per head, for the ring path of decode attention (attention_ring.cuh).
//
// Why: fold_keys (attention_math.cuh) gives each lane DPL dims of every key, so each key's score needs a
// five-level shuffle reduction and the running state is updated every 4 keys: a 16-key KV page took ≈ 4000
// SM cycles of dependent latency (clock64 around warp 0's steps: ≈ 1000 per step), and
// that loop sat on every layer's critical path. Here DPL lanes share a key (32 dims each), so a score takes
// log2(DPL) shuffles, the softmax of the whole pass is one warp reduction, and the state is read and
// written once per pass; the V product then broadcasts each key's weight to the lanes owning the output dims.
#pragma once

#include "../tk/shared_vec.cuh"
#include "attention_math.cuh"
#include "bf16_unpack.cuh"

namespace mk::vm {

// Keys folded per call: DPL lanes per key (head_dim = 32 * DPL).
template <int DPL>
inline constexpr int PASS_KEYS = 32 / DPL;

// Keys [0, nvalid) (nvalid <= PASS_KEYS<DPL>) with bf16 rows at shared addresses k_addr + key * hd * 2 and
// v_addr + key * hd * 2, into every head's state in `slot` ([h][hd + 2]: lane-owned dims of o, then m, l;
// as fold_keys). q_addr: the NH queries [h][hd] (fp32, shared). Rows at or past nvalid are never read.
template <int DPL>
__device__ __forceinline__ void fold_pass(float* slot, uint32_t q_addr, int NH, float scale, uint32_t k_addr,
                                          uint32_t v_addr, int nvalid) {
  constexpr int HD = 32 * DPL, CHUNKS = HD / 8, ROW = HD * 2;  // 8-dim (16-byte) chunks per row; row bytes
  static_assert(LANE_DIMS_OK<DPL>, "head_dim must be 32, 64, 128 or 256");
  const int lane = tk::lane_id(), key = lane / DPL, part = lane % DPL;
  const bool valid = key < nvalid;
  // This lane's 4 chunks of its key: chunk (j * DPL + part + DPL * key) % CHUNKS. The rotation by key puts
  // the 8 lanes of one shared-memory phase on 8 different 16-byte bank groups.
  int chunk[4];
  uint4 kraw[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    chunk[j] = (j * DPL + part + DPL * key) % CHUNKS;
    kraw[j] = tk::load_shared_u4_if(k_addr + key * ROW + chunk[j] * 16, valid);
  }
#pragma unroll 1
  for (int h = 0; h < NH; ++h) {
    float* st = slot + h * (HD + 2);
    float part[4];  // a chain per chunk: four chains of 8 products instead of one of 32
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float kf[8];
      bf16x8_to_float(kraw[j], kf);
      const uint32_t qa = q_addr + (h * HD + chunk[j] * 8) * 4;
      const float4 q0 = tk::load_shared_f4(qa), q1 = tk::load_shared_f4(qa + 16);
      part[j] = fmaf(q0.x, kf[0], fmaf(q0.y, kf[1], fmaf(q0.z, kf[2], q0.w * kf[3])));
      part[j] = fmaf(q1.x, kf[4], fmaf(q1.y, kf[5], fmaf(q1.z, kf[6], fmaf(q1.w, kf[7], part[j]))));
    }
    float dot = (part[0] + part[1]) + (part[2] + part[3]);
#pragma unroll
    for (int off = 1; off < DPL; off <<= 1) dot += __shfl_xor_sync(tk::FULL_MASK, dot, off);  // the key's lanes
    const float s = valid ? dot * scale : -INFINITY;
    float mx = s;
#pragma unroll
    for (int off = DPL; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(tk::FULL_MASK, mx, off));
    const float m_old = st[HD], l_old = st[HD + 1], m_new = fmaxf(m_old, mx);
    if (m_new == -INFINITY) continue;  // no valid key yet (uniform per warp)
    // __expf: ex2.approx on the scaled argument (a few ulp), where expf's exact range reduction is a dozen
    // dependent instructions on every head's chain; its -inf gives 0 as expf's does.
    const float p = valid ? __expf(s - m_new) : 0.f;
    float sum = p;  // over the lanes with this lane's `part`: every key once
#pragma unroll
    for (int off = DPL; off < 32; off <<= 1) sum += __shfl_xor_sync(tk::FULL_MASK, sum, off);
    const float alpha = __expf(m_old - m_new);
    float o[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) o[d] = st[lane * DPL + d] * alpha;
#pragma unroll
    for (int kk = 0; kk < PASS_KEYS<DPL>; ++kk) {
      const float pk = __shfl_sync(tk::FULL_MASK, p, kk * DPL);
      if (kk < nvalid) {  // uniform; a row past nvalid may hold anything (even NaN bits)
        float vv[DPL];
        load_head_dims_shared<DPL>(v_addr + kk * ROW + lane * DPL * 2, vv);
#pragma unroll
        for (int d = 0; d < DPL; ++d) o[d] = fmaf(pk, vv[d], o[d]);
      }
    }
    __syncwarp();  // every lane has read m_old, l_old and its o
#pragma unroll
    for (int d = 0; d < DPL; ++d) st[lane * DPL + d] = o[d];
    if (lane == 0) {
      st[HD] = m_new;
      st[HD + 1] = fmaf(l_old, alpha, sum);
    }
    __syncwarp();
  }
}

}  // namespace mk::vm
