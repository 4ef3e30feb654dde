// attention_math.cuh: the per-warp pieces of decode attention shared by both key sources (keys read
// from the paged cache in global memory, attention_global.cuh; keys streamed through the page ring,
// attention_ring.cuh): a lane's dims of one cached row, the online-softmax fold of a few keys into a
// warp's running (o, m, l) per head (the ring pages use fold_pass, attention_pass.cuh, on the same state),
// and the merge of the warps' states into each head's output.
#pragma once

#include "code_size.cuh"

#include "../tk/shared_vec.cuh"
#include "bf16_unpack.cuh"
#include "state.cuh"

namespace mk::vm {

// Keys per warp per step of fold_keys (keys from global memory in attend(), and the ring path's new key;
// the ring pages themselves fold a pass at a time, attention_pass.cuh): 4, as the double-buffered K/V
// registers grow with keys and dims. 8 keys for head_dim <= 64 measured 0.9 % slower on the 1B shape (H200,
// with the ring pages on this fold too: 0.868 vs 0.860 ms/token), 2 keys 3 % slower: a step is a chain of
// shuffles and exps, so fewer keys per step means more steps.
// head_dim 256 takes 2: its double-buffered K/V registers then match head_dim 128's (4 keys x 4 dims).
template <int DPL>
inline constexpr int KEYS_PER_STEP = DPL <= 4 ? 4 : 2;

// Dims per lane of the head dims the kernel runs (engine/instructions/head_padding.py LANE_HEAD_DIMS: 32 x DPL).
template <int DPL>
inline constexpr bool LANE_DIMS_OK = DPL == 1 || DPL == 2 || DPL == 4 || DPL == 8;

template <int DPL>
__device__ __forceinline__ void unpack_head_dims(uint32_t lo, uint32_t hi, float (&v)[DPL]) {
  static_assert(DPL <= 4, "8 dims per lane unpack a 16-byte word: bf16x8_to_float");
  if constexpr (DPL == 1) {
    v[0] = __bfloat162float(__ushort_as_bfloat16((unsigned short)lo));
  } else {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&lo));
    v[0] = a.x; v[1] = a.y;
    if constexpr (DPL == 4) {
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&hi));
      v[2] = b.x; v[3] = b.y;
    } else {
      static_assert(DPL == 2, "head_dim must be 32, 64, 128 or 256");
    }
  }
}

// The softmax scale 1/sqrt(head_dim) of the checkpoint's head dim: a stored head may be wider, its extra dims zero
// (engine/instructions/head_padding.py), which changes no score.
__device__ __forceinline__ float attn_scale(const Globals& g) { return 1.0f / sqrtf((float)g.model_head_dim); }

// A lane's DPL dims of a K or V row in global memory (written by other SMs: bypass L1).
template <int DPL>
__device__ __forceinline__ void load_head_dims(const bf16* p, float (&v)[DPL]) {
  if constexpr (DPL == 1) {
    unpack_head_dims<DPL>(__ldcg(reinterpret_cast<const unsigned short*>(p)), 0, v);
  } else if constexpr (DPL == 2) {
    unpack_head_dims<DPL>(__ldcg(reinterpret_cast<const unsigned int*>(p)), 0, v);
  } else if constexpr (DPL == 4) {
    const uint2 raw = __ldcg(reinterpret_cast<const uint2*>(p));
    unpack_head_dims<DPL>(raw.x, raw.y, v);
  } else {
    static_assert(DPL == 8, "head_dim must be 32, 64, 128 or 256");
    bf16x8_to_float(__ldcg(reinterpret_cast<const uint4*>(p)), v);
  }
}

// The same from a row in shared memory (addr: shared-window address of the lane's first dim).
template <int DPL>
__device__ __forceinline__ void load_head_dims_shared(uint32_t addr, float (&v)[DPL]) {
  if constexpr (DPL == 1) {
    unpack_head_dims<DPL>(tk::load_shared_u16(addr), 0, v);
  } else if constexpr (DPL == 2) {
    unpack_head_dims<DPL>(tk::load_shared_u32(addr), 0, v);
  } else if constexpr (DPL == 4) {
    const uint2 raw = tk::load_shared_u2(addr);
    unpack_head_dims<DPL>(raw.x, raw.y, v);
  } else {
    static_assert(DPL == 8, "head_dim must be 32, 64, 128 or 256");
    bf16x8_to_float(tk::load_shared_u4(addr), v);
  }
}

// A warp's running state per head lives in its merge slot: [h][hd + 2] = lane-owned dims of o, then m
// and l (the same in every lane). Keeping it in shared memory instead of registers lets the head loop
// stay rolled: the unrolled MAX_GQA x DPL version was ~56 KB of code per head size, and the whole hot
// path of a layer must fit the SM's instruction cache (docs/PROFILING.md).
template <int DPL>
__device__ __forceinline__ void reset_merge_slot(float* slot, int NH, int hd) {
  const int lane = tk::lane_id();
  for (int h = 0; h < NH; ++h) {
    float* st = slot + h * (hd + 2);
#pragma unroll
    for (int d = 0; d < DPL; ++d) st[lane * DPL + d] = 0.f;
    if (lane == 0) { st[hd] = -INFINITY; st[hd + 1] = 0.f; }
  }
  __syncwarp();
}

// Folds KPS keys (lane-owned dims kd / vd; valid[u] false: masked out) into every head's running state.
// q_sh: the NH queries [h][hd] in shared memory.
template <int DPL, int KPS>
__device__ __forceinline__ void fold_keys(float* slot, const float* q_sh, int NH, int hd, float scale,
                                          const float (&kd)[KPS][DPL], const float (&vd)[KPS][DPL],
                                          const bool (&valid)[KPS]) {
  const int lane = tk::lane_id();
#pragma unroll 1
  for (int h = 0; h < NH; ++h) {
    float* st = slot + h * (hd + 2);
    float qv[DPL], sc[KPS];
#pragma unroll
    for (int d = 0; d < DPL; ++d) qv[d] = q_sh[h * hd + lane * DPL + d];
#pragma unroll
    for (int u = 0; u < KPS; ++u) {
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < DPL; ++d) dot = fmaf(qv[d], kd[u][d], dot);
      sc[u] = dot;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < KPS; ++u) sc[u] += __shfl_xor_sync(tk::FULL_MASK, sc[u], off);
    const float m_old = st[hd], l_old = st[hd + 1];
    float m_new = m_old;
#pragma unroll
    for (int u = 0; u < KPS; ++u) {
      sc[u] = valid[u] ? sc[u] * scale : -INFINITY;
      m_new = fmaxf(m_new, sc[u]);
    }
    if (m_new == -INFINITY) continue;  // no valid key in this step (uniform per warp)
    const float alpha = expf(m_old - m_new);
    float l = l_old * alpha, o[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) o[d] = st[lane * DPL + d] * alpha;
#pragma unroll
    for (int u = 0; u < KPS; ++u) {
      const float p = expf(sc[u] - m_new);
      l += p;
#pragma unroll
      for (int d = 0; d < DPL; ++d) o[d] = fmaf(p, vd[u][d], o[d]);
    }
    __syncwarp();  // every lane has read m_old and l_old
#pragma unroll
    for (int d = 0; d < DPL; ++d) st[lane * DPL + d] = o[d];
    if (lane == 0) { st[hd] = m_new; st[hd + 1] = l; }
    __syncwarp();
  }
}

// After a consumer barrier: merges the warps' states into each head's output for token t and hands
// every element to emit(t, h, d, out, lse) (lse = -inf and out = 0 when no key was attended).
template <typename Emit>
__device__ __forceinline__ void merge_warp_states(const float* merge, int NH, int hd, int t, Emit emit) {
  const int stride_h = hd + 2, stride_w = NH * stride_h;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < NH * hd; idx += CONSUMER_THREADS) {
    const int h = idx / hd, d = idx % hd;
    float M = -INFINITY;
    for (int wi = 0; wi < NUM_CONSUMER_WARPS; ++wi) M = fmaxf(M, merge[wi * stride_w + h * stride_h + hd]);
    float out = 0.f, lse = -INFINITY;
    if (M != -INFINITY) {
      float L = 0.f, O = 0.f;
      for (int wi = 0; wi < NUM_CONSUMER_WARPS; ++wi) {
        const float* src = merge + wi * stride_w + h * stride_h;
        const float f = expf(src[hd] - M);
        L = fmaf(src[hd + 1], f, L);
        O = fmaf(src[d], f, O);
      }
      out = O / L;
      lse = M + logf(L);
    }
    emit(t, h, d, out, lse);
  }
}

}  // namespace mk::vm
