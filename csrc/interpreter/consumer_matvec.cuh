// consumer_matvec.cuh: the consumer warps' side of the page ring. out[t][r] = sum_k x[t][k] * W[r][k]
// for the NX activation rows in shared x and every weight row the instruction streams. Page p of an
// instruction goes to consumer warp p % NUM_CONSUMER_WARPS; each page holds whole rows, so no
// cross-warp reduction is needed. Lanes own 8 consecutive k (one 16-byte bf16 vector) per step; with one
// activation row (batch-1 decode) the page goes to the tensor cores instead (dot_rows_mma.cuh).
#pragma once

#include "../tk/shared_vec.cuh"
#include "activations.cuh"
#include "bf16_unpack.cuh"
#include "dot_fp8.cuh"
#include "dot_rows_mma.cuh"
#include "dot_short_rows.cuh"
#include "dot_tokens_mma.cuh"
#include "marks.cuh"
#include "state.cuh"
#include "token_groups.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

// Rows of one page handled per call: fewer for many activation rows, so the accumulators and the
// activation vectors stay in registers (the kernel is capped at 168 registers per thread).
template <int NX>
inline constexpr int ROWS_PER_CALL = NX >= 8 ? 2 : 4;

// k-steps (of 256 columns) handled per loop iteration: two for few activation rows, so that the next
// step's shared loads are in flight while this step's FMAs run (registers allow it only for NX <= 2).
template <int NX>
inline constexpr int K_STEPS_PER_ITER = NX <= 2 ? 2 : 1;

// acc[r][t] += W[row r][k..k+8) . x[t][k..k+8) for the vectors of one k-step already in registers.
template <int NX, int R>
__device__ __forceinline__ void fma_step(float (&acc)[R][NX], const uint4 (&raw)[R], const float4 (&xa)[NX],
                                         const float4 (&xb)[NX]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float wv[8];
    bf16x8_to_float(raw[r], wv);
#pragma unroll
    for (int t = 0; t < NX; ++t) {
      // two partial sums: halves the dependent FMA chain
      float lo = fmaf(wv[0], xa[t].x, acc[r][t]), hi = wv[4] * xb[t].x;
      lo = fmaf(wv[1], xa[t].y, lo);
      hi = fmaf(wv[5], xb[t].y, hi);
      lo = fmaf(wv[2], xa[t].z, lo);
      hi = fmaf(wv[6], xb[t].z, hi);
      lo = fmaf(wv[3], xa[t].w, lo);
      hi = fmaf(wv[7], xb[t].w, hi);
      acc[r][t] = lo + hi;
    }
  }
}

// Loads one k-step's vectors (lane-owned columns k..k+8): weight rows first..first+R of the page and
// NX activation rows. GUARD: predicated on k < K, r < nrows and t < nx (zeros outside); without it
// every load is unconditional (the caller knows all lanes are in range) except activation rows past
// nx when NX > 1, which may lie outside shared x.
template <int NX, int R, bool GUARD>
__device__ __forceinline__ void load_step(uint4 (&raw)[R], float4 (&xa)[NX], float4 (&xb)[NX], uint32_t page_addr,
                                          int row_bytes, int first, int nrows, int K, uint32_t x_addr, int nx, int k) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint32_t a = page_addr + (uint32_t)((first + r) * row_bytes + k * 2);
    raw[r] = GUARD ? tk::load_shared_u4_if(a, k < K && r < nrows) : tk::load_shared_u4(a);
  }
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    const uint32_t a = x_addr + (uint32_t)(t * K + k) * 4;
    const bool need_guard = GUARD || NX > 1;
    const bool in = (!GUARD || k < K) && t < nx;
    xa[t] = need_guard ? tk::load_shared_f4_if(a, in) : tk::load_shared_f4(a);
    xb[t] = need_guard ? tk::load_shared_f4_if(a + 16, in) : tk::load_shared_f4(a + 16);
  }
}

// Up to ROWS_PER_CALL<NX> rows of one page against NX activation rows.
// NX is the compile-time bound on activation rows, nx <= NX the actual count: rows past nx are
// neither read from x nor written to out (out is sized for nx rows only). FULL: nrows == R.
// Every shared load of an iteration is issued before its math, so a warp pays one shared-memory
// latency per iteration instead of one per row (the per-row guarded version measured 2.1 µs per
// 16 KB page, which made the consumers a co-bottleneck of the weight stream). The main loop covers
// the k-range every lane has in full, unguarded; a guarded tail takes the rest.
template <int NX, bool FULL>
__device__ __forceinline__ void dot_rows(uint32_t page_addr, int row_bytes, int first, int nrows, int K,
                                         uint32_t x_addr, int nx, float* out, int out_row0, int out_stride) {
  const int lane = tk::lane_id();
  constexpr int R = ROWS_PER_CALL<NX>, U = K_STEPS_PER_ITER<NX>;
  float acc[U][R][NX];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NX; ++t) acc[u][r][t] = 0.f;
  int kb = 0;
  for (; kb + 256 * U <= K; kb += 256 * U) {
    uint4 raw[U][R];
    float4 xa[U][NX], xb[U][NX];
#pragma unroll
    for (int u = 0; u < U; ++u)
      load_step<NX, R, !FULL>(raw[u], xa[u], xb[u], page_addr, row_bytes, first, nrows, K, x_addr, nx,
                              kb + 256 * u + lane * 8);
#pragma unroll
    for (int u = 0; u < U; ++u) fma_step<NX, R>(acc[u], raw[u], xa[u], xb[u]);
  }
  for (; kb < K; kb += 256) {
    uint4 raw[R];
    float4 xa[NX], xb[NX];
    load_step<NX, R, true>(raw, xa, xb, page_addr, row_bytes, first, nrows, K, x_addr, nx, kb + lane * 8);
    fma_step<NX, R>(acc[0], raw, xa, xb);
  }
  // Every row's butterfly first, then the stores: a store branch between them would serialise them.
  float v[R][NX];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NX; ++t) {
      v[r][t] = acc[0][r][t];
#pragma unroll
      for (int u = 1; u < U; ++u) v[r][t] += acc[u][r][t];
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NX; ++t) v[r][t] += __shfl_xor_sync(tk::FULL_MASK, v[r][t], o);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NX; ++t)
        if ((FULL || r < nrows) && t < nx) out[t * out_stride + out_row0 + r] = v[r][t];
  }
}

// Not inlined: the five weight-streaming opcodes share one copy of this loop per NX (the hot code of a
// layer then stays small). `sm` is taken by value on purpose: a reference would make the caller keep
// its Shared in memory, and every shared-memory access through it, in every opcode, would become a
// generic load (measured: 7 % slower per token). Inside, the dot products load by shared address.
// Nothing on its way in divides: the page count and rows per page are slot words the controller derived,
// and the ring position is the shared cursor (Shared::ring_cursor).
// PATH picks the page math compiled into this copy of the loop: GENERAL (one row on the tensor cores when it
// can, else CUDA cores), ONE_ROW_MMA (the batch-1 kernel variants: only the one-row tensor-core path; a stream
// whose rows cannot take it, or with the option off, is the host's mistake (engine/cuda/variant.py) and records
// a variant mismatch before any page is consumed) or TOKENS_MMA (several rows on the tensor cores: matvec()
// takes it exactly when x was written as bf16 rows, activations.cuh x_is_bf16).
enum class PagePath { GENERAL, ONE_ROW_MMA, TOKENS_MMA };

// `pass`: which pass over the instruction's pages this is (token_groups.cuh); later passes find their pages in
// the ring already, and only the last frees them. `out` / `out_stride`: where row r of x row t goes, out[t * out_stride
// + r] (nullptr: shared `out`, rows of the stream's length); only the TOKENS_MMA path takes another place (an LM
// head's logits in global memory: ops/lm_head.cuh).
template <int NX, PagePath PATH = PagePath::GENERAL>
__device__ __noinline__ bool consume_pages(const Globals& g, const Shared sm, int nx, const int* instr,
                                           const PagePass pass, float* out = nullptr, int out_stride = 0) {
  // Read here from the slot, not passed: every op's call site then marshals no stream (the general kernel spilled
  // more with the stream's fp8 scales in the argument list).
  const WeightStream ws = slot_stream(instr);
  if (out == nullptr) {
    out = sm.out;
    out_stride = ws.rows;
  }
  constexpr bool MMA_ONLY = PATH == PagePath::ONE_ROW_MMA;
  const int warp = tk::warp_id(), lane = tk::lane_id();
  // Weight pages follow any KV pages of the stream (a fused ATTN_O_PROJ's; kv_stream.cuh), whose consumer
  // already moved the cursor past them.
  const int n_pages = instr[W_SLOT_NUM_PAGES] - instr[W_SLOT_KV_RING_PAGES], rpp = instr[W_SLOT_ROWS_PER_PAGE];
  const int row_bytes = ws.row_bytes();
  const bool fp8 = ws.scale != nullptr;  // e4m3 rows (dot_fp8.cuh), each output times its row's scale
  const bool mma = NX == 1 && nx == 1 && g.mma_matvec && mma_row_ok(ws.row_elems);
  if constexpr (MMA_ONLY) {
    if (!mma) return variant_mismatch(g, instr);
  }
  if constexpr (PATH == PagePath::TOKENS_MMA) {  // never fp8 rows: their x is fp32 (Globals::mma_x_rows = 1)
    if (fp8) return variant_mismatch(g, instr);
  }
  const int x_pitch_bf16 = ws.row_elems + X_ROW_SKEW;  // TOKENS_MMA: activations.cuh x_pitch
  if (!(pass.first && pass.last) && n_pages > sm.ring_pages) return ring_hold_error(g, instr, n_pages, sm.ring_pages);
  bool ok = true;
  RingWalk walk(sm, warp);  // this warp's pages p = warp, warp + 8, ...
  for (int p = warp; p < n_pages; p += NUM_CONSUMER_WARPS) {
    const uint32_t n = walk.pos0 + p, ring = walk.ring;
    if (pass.first) {
      if (ok) ok = wait_page_issued(g, sm, n, instr);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring], walk.round & 1, instr, SITE_CONSUMER_PAGE_FULL, n);
      ok = __all_sync(tk::FULL_MASK, ok);  // the warp's shuffles below need every lane
      if (p == n_pages - 1 && lane == 0) timing_mark(g, instr, MARK_LAST_PAGE);
      if (p == 0 && lane == 0) timing_mark(g, instr, MARK_FIRST_PAGE);
    }
    if (ok) {
      const int row0 = p * rpp, rows = min(rpp, ws.rows - row0);
      const uint32_t page_addr = tk::smem_addr(sm.page(ring)), x_addr = tk::smem_addr(sm.x);
      constexpr int R = ROWS_PER_CALL<NX>;
      if (fp8) {
        // One row on the tensor cores (x f16), else the CUDA cores (x fp32: activations.cuh x_is_bf16).
        if (NX == 1 && mma) {
          dot_page_mma_fp8(page_addr, row_bytes, rows, ws.row_elems, x_addr, out, row0, ws.scale + row0);
        } else if constexpr (PATH == PagePath::GENERAL) {
          dot_page_fp8_cores<NX>(page_addr, row_bytes, rows, ws.row_elems, x_addr, nx, out, row0, out_stride,
                                 ws.scale + row0);
        }
      } else if constexpr (PATH == PagePath::TOKENS_MMA) {
        dot_page_tokens_mma(page_addr, row_bytes, rows, ws.row_elems, x_addr, x_pitch_bf16, nx, out, row0,
                            out_stride);
      } else if (NX == 1 && mma) {  // NX == 1 keeps the tensor-core path out of the other instantiations
        const long long c0 = clock64();
        dot_page_mma(page_addr, row_bytes, rows, ws.row_elems, x_addr, sm.out, row0);
        if (p == n_pages - 1) {  // the profile's page cycles (marks.cuh); only here: elsewhere it cost spills
          __syncwarp();  // every lane's dot products, not only lane 0's
          if (lane == 0) timing_value(g, instr, MARK_LAST_PAGE_CYCLES, clock64() - c0);
        }
      } else if constexpr (MMA_ONLY) {
        // never reached: checked above
      } else if (ws.row_elems <= SHORT_ROW_MAX_K) {  // many short rows per page: reduce 8 rows together
        for (int r = 0; r < rows; r += SHORT_ROWS_PER_CALL<NX>)
          dot_short_rows<NX>(page_addr, row_bytes, r, min(SHORT_ROWS_PER_CALL<NX>, rows - r), ws.row_elems, x_addr,
                             nx, sm.out, row0 + r, ws.rows);
      } else {
        int r = 0;
        for (; r + R <= rows; r += R)
          dot_rows<NX, true>(page_addr, row_bytes, r, R, ws.row_elems, x_addr, nx, sm.out, row0 + r, ws.rows);
        if (r < rows)
          dot_rows<NX, false>(page_addr, row_bytes, r, rows - r, ws.row_elems, x_addr, nx, sm.out, row0 + r, ws.rows);
      }
    }
    __syncwarp();
    if (pass.last) {
      if (lane == 0 && p < n_pages - g.defer_free_pages) tk::arrive(sm.page_empty[ring]);  // else held (consumer.cuh)
      if (p == n_pages - 1 && lane == 0) timing_mark(g, instr, MARK_LAST_DONE);
    }

    walk.next();
  }
  const bool all_ok = consumer_all(ok);  // also the barrier before the epilogue reads shared `out`
  if (threadIdx.x == 0 && pass.last) {
    walk.finish(sm, n_pages);
    timing_mark(g, instr, MARK_COMPUTED);
  }
  return all_ok;
}

// The instruction's weight stream (from its slot) against nx activation rows in x, dispatched on nx
// (1 for batch-1 decode keeps registers low). The batch-1 kernel (B1) holds only the one-row tensor-core loop:
// without the CUDA-core paths beside it (dead code for its streams) batch-1 decode ran 1 % faster (1B, H200:
// 0.780 -> 0.772 ms/token).
// `grp`: the token group whose rows x holds (token_groups.cuh).
template <bool B1>
__device__ __forceinline__ bool matvec(const Globals& g, const Shared& sm, const TokenGroup& grp, const int* instr) {
  const int nx = grp.n, row_elems = instr[W_SLOT_STREAM + 3];
  if constexpr (B1) {
    if (nx != 1) return variant_mismatch(g, instr);
    return consume_pages<1, PagePath::ONE_ROW_MMA>(g, sm, 1, instr, ONLY_PASS);
  }
  const PagePass pass = grp.pass;
  if (nx <= 1) return consume_pages<1>(g, sm, nx, instr, pass);
  if (x_is_bf16(g, nx, row_elems))
    return consume_pages<MAX_TOKENS_PER_MATVEC, PagePath::TOKENS_MMA>(g, sm, nx, instr, pass);
  // Groups of more rows than the CUDA-core loops hold take the tensor cores only: a stream that needs them there is
  // the host's mistake (engine/cuda/limits.py token_group).
  if (nx > MAX_TOKENS_PER_MATVEC) return variant_mismatch(g, instr);
  if (nx <= 2) return consume_pages<2>(g, sm, nx, instr, pass);
  if (nx <= 4) return consume_pages<4>(g, sm, nx, instr, pass);
  return consume_pages<8>(g, sm, nx, instr, pass);
}

// The weight-streaming MLP ops and the LM head, once a token group's input is in shared memory: on the first group
// the timing mark and the loader back to its streaming cap (it kept the low one while the input was read:
// low_cap_inputs), then the group's matvec.
template <bool B1>
__device__ __forceinline__ bool streamed_matvec(const Globals& g, const Shared& sm, const TokenGroup& grp, const int* w) {
  if (grp.pass.first && threadIdx.x == 0) {
    timing_mark(g, w, MARK_INPUT);
    set_low_cap_from(sm, NO_LOW_CAP);
  }
  return matvec<B1>(g, sm, grp, w);
}

}  // namespace mk::vm
