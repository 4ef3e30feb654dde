// consumer_matvec.cuh: the consumer warps' side of the page ring. out[t][r] = sum_k x[t][k] * W[r][k]
// for the NX activation rows in shared x and every weight row the instruction streams. Page p of an
// instruction goes to consumer warp p % NUM_CONSUMER_WARPS; each page holds whole rows, so no
// cross-warp reduction is needed. Lanes own 8 consecutive k (one 16-byte bf16 vector) per step.
#pragma once

#include "../tk/shared_vec.cuh"
#include "marks.cuh"
#include "state.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

struct RingCursor {
  uint32_t pages = 0;  // pages consumed since launch (same count the loader keeps)
};

__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// Rows of one page handled per call: fewer for many activation rows, so the accumulators and the
// activation vectors stay in registers (the kernel is capped at 168 registers per thread).
template <int NX>
inline constexpr int ROWS_PER_CALL = NX >= 8 ? 2 : 4;

// Up to ROWS_PER_CALL<NX> rows of one page against NX activation rows.
// NX is the compile-time bound on activation rows, nx <= NX the actual count: rows past nx are
// neither read from x nor written to out (out is sized for nx rows only).
template <int NX>
__device__ __forceinline__ void dot_rows(const uint8_t* page, int row_bytes, int first, int nrows, int K,
                                         const float* x, int nx, float* out, int out_row0, int out_stride) {
  const int lane = tk::lane_id();
  const uint32_t x_addr = tk::smem_addr(x), page_addr = tk::smem_addr(page);  // explicit ld.shared (shared_vec.cuh)
  constexpr int R = ROWS_PER_CALL<NX>;
  float acc[R][NX];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NX; ++t) acc[r][t] = 0.f;
  for (int k = lane * 8; k < K; k += 256) {
    float xv[NX][8];
#pragma unroll
    for (int t = 0; t < NX; ++t) {
      if (t >= nx) {
#pragma unroll
        for (int e = 0; e < 8; ++e) xv[t][e] = 0.f;
        continue;
      }
      const uint32_t xa = x_addr + (uint32_t)(t * K + k) * 4;
      const float4 a = tk::load_shared_f4(xa);
      const float4 b = tk::load_shared_f4(xa + 16);
      xv[t][0] = a.x; xv[t][1] = a.y; xv[t][2] = a.z; xv[t][3] = a.w;
      xv[t][4] = b.x; xv[t][5] = b.y; xv[t][6] = b.z; xv[t][7] = b.w;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nrows) {
        const uint4 raw = tk::load_shared_u4(page_addr + (uint32_t)((first + r) * row_bytes + k * 2));
        float wv[8];
        bf16x8_to_float(raw, wv);
#pragma unroll
        for (int t = 0; t < NX; ++t)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][t] = fmaf(wv[e], xv[t][e], acc[r][t]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NX; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(tk::FULL_MASK, v, o);
      if (lane == 0 && r < nrows && t < nx) out[t * out_stride + out_row0 + r] = v;
    }
}

// Not inlined: the five weight-streaming opcodes share one copy of this loop per NX (the hot code of a
// layer then stays small). `sm` is taken by value on purpose: a reference would make the caller keep
// its Shared in memory, and every shared-memory access through it, in every opcode, would become a
// generic load (measured: 7 % slower per token). Inside, the dot products load by shared address.
template <int NX>
__device__ __noinline__ bool consume_pages(const Globals& g, const Shared sm, RingCursor& cur, const WeightStream ws,
                                           int nx, const int* instr) {
  const int warp = tk::warp_id(), lane = tk::lane_id();
  const int n_pages = ws.num_pages(), rpp = ws.rows_per_page(), row_bytes = ws.row_elems * 2;
  bool ok = true;
  for (int p = 0; p < n_pages; ++p) {
    const uint32_t n = cur.pages + p;
    if (p % NUM_CONSUMER_WARPS != warp) continue;
    const int ring = n % NUM_PAGES;
    if (ok) ok = wait_page_issued(g, sm, n, instr);
    if (ok) ok = wait_pipeline(g, sm.page_full[ring], (n / NUM_PAGES) & 1, instr, SITE_CONSUMER_PAGE_FULL, n);
    ok = __all_sync(tk::FULL_MASK, ok);  // the warp's shuffles below need every lane
    if (p == n_pages - 1 && lane == 0) timing_mark(g, instr, MARK_LAST_PAGE);
    if (p == 0 && lane == 0) timing_mark(g, instr, MARK_FIRST_PAGE);
    if (ok) {
      const int row0 = p * rpp, rows = min(rpp, ws.rows - row0);
      for (int r = 0; r < rows; r += ROWS_PER_CALL<NX>)
        dot_rows<NX>(sm.page(ring), row_bytes, r, min(ROWS_PER_CALL<NX>, rows - r), ws.row_elems, sm.x, nx,
                     sm.out, row0 + r, ws.rows);
    }
    __syncwarp();
    if (lane == 0) tk::arrive(sm.page_empty[ring]);
    if (p == n_pages - 1 && lane == 0) timing_mark(g, instr, MARK_LAST_DONE);
  }
  cur.pages += n_pages;
  const bool all_ok = consumer_all(ok);  // also the barrier before the epilogue reads shared `out`
  if (threadIdx.x == 0) timing_mark(g, instr, MARK_COMPUTED);
  return all_ok;
}

// Dispatch on the number of activation rows (1 for batch-1 decode keeps registers low).
__device__ __forceinline__ bool matvec(const Globals& g, const Shared& sm, RingCursor& cur,
                                       const WeightStream& ws, int nx, const int* instr) {
  if (nx <= 1) return consume_pages<1>(g, sm, cur, ws, nx, instr);
  if (nx <= 2) return consume_pages<2>(g, sm, cur, ws, nx, instr);
  if (nx <= 4) return consume_pages<4>(g, sm, cur, ws, nx, instr);
  return consume_pages<8>(g, sm, cur, ws, nx, instr);
}

}  // namespace mk::vm
