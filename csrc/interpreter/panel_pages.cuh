// panel_pages.cuh: ATTN_O_PROJ's slice of W_o as swizzled 128-byte panels, copied by 2-D TMA boxes and
// multiplied on the tensor cores.
//
// Why: the fused op's W_o slice is `rows` rows of only K = heads x head_dim columns (64-256), 128-512
// bytes per row in global memory. As one bulk copy per row a page took 32-128 copies and landed late,
// and the row-pair mma of dot_rows_mma.cuh needs K > 256. Here the host encodes one tensor map over all
// of W_o ([layers x hidden, n_heads x head_dim], boxes of 32 rows x 64 columns, 128-byte swizzle:
// Globals::w_o_map, written once into global memory) and the loader fills a page with 4 boxes. A page holds
// rpp = PAGE_BYTES / (2K) rows, panel-major: panel c (columns 64c..64c+63) of row r at byte c*rpp*128 + r*128,
// its 16-byte chunk j stored at chunk j ^ (r % 8) (the swizzle: ldmatrix of 8 rows then reads 8 different
// bank groups). One mma m16n8k16 takes 16 rows x 16 columns; x (bf16) is B's column 0.
#pragma once

#include "code_size.cuh"

#include "../tk/mma.cuh"
#include "../tk/shared_vec.cuh"
#include "../tk/tensor_map.cuh"
#include "marks.cuh"
#include "state.cuh"
#include "kv_stream.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

inline constexpr int PANEL_COLS = 64;  // bf16 columns of one 128-byte panel
inline constexpr int BOX_ROWS = 32;    // rows of one TMA box
inline constexpr int BOXES_PER_PAGE = PAGE_BYTES / (BOX_ROWS * PANEL_COLS * 2);
static_assert(BOXES_PER_PAGE * BOX_ROWS * PANEL_COLS * 2 == PAGE_BYTES && (BOX_ROWS * 128) % 1024 == 0,
              "whole boxes per page, each at a 1024-byte boundary (the 128-byte swizzle's period)");

// K (columns per row) the panel layout takes: whole panels and whole boxes of rows per page.
__host__ __device__ constexpr bool panel_k_ok(int K) { return K == 64 || K == 128 || K == 256; }

// Whether instruction w's weight pages are panel pages (only ATTN_O_PROJ's). Loader and consumers both ask,
// from the same slot words and Globals, so they agree. One token only (the page math takes one activation
// row; the fused path is for one sequence, so the step's token count is the op's), and only behind a KV
// stream (the loader issues them from its KV branch).
__device__ __forceinline__ bool panel_stream(const Globals& g, const int* w) {
  return w[W_OPCODE] == OP_ATTN_O_PROJ && w[W_SLOT_KV_MODE] != 0 && g.w_o_map != nullptr && g.w_o_scale == nullptr &&
         g.sa_header[SA_NUM_TOKENS] == 1 && panel_k_ok(w[W_SLOT_STREAM + 3]);
}

// Loader lane: arm the page on `full` (publishing `position` as issued) and copy weight page wp of w's
// W_o slice as BOXES_PER_PAGE boxes (rows past the slice's end are copied too and never read).
__device__ __forceinline__ void issue_panel_page(const Globals& g, uint32_t* ring_issued, const int* w, int wp,
                                                 uint8_t* dst, tk::semaphore& full, uint32_t position) {
  tk::arrive_expect_tx(full, PAGE_BYTES);
  tk::store_release_shared(ring_issued, position + 1);  // after arming: see wait_page_issued
  const int* a = w + W_OPERANDS;  // seq, kv_group, head_begin, head_end, row_begin, row_end
  const int rpp = w[W_SLOT_ROWS_PER_PAGE], boxes_per_panel = rpp / BOX_ROWS;
  const int row = w[W_LAYER] * g.hidden_size + a[4] + wp * rpp;
  const int col = (a[1] * (g.n_heads / g.n_kv) + a[2]) * g.head_dim;
  for (int b = 0; b < BOXES_PER_PAGE; ++b) {
    const int panel = b / boxes_per_panel, r0 = (b % boxes_per_panel) * BOX_ROWS;
    tk::tensor_load_2d<tk::cache_hint::evict_first>(dst + panel * rpp * 128 + r0 * 128, g.w_o_map, row + r0,
                                                    col + panel * PANEL_COLS, full);
  }
}

// Loader lane: page p of a KV stream (kv_stream.cuh): its KV pages, then a fused op's W_o pages as panels or,
// where the slice is not whole panels, one copy per row.
__device__ __forceinline__ void issue_kv_stream_page(const Globals& g, uint32_t* ring_issued, const int* w, int p,
                                                     uint8_t* dst, tk::semaphore& full, uint32_t position) {
  const int kv_pages = w[W_SLOT_KV_RING_PAGES];
  if (p < kv_pages) {
    issue_kv_page(g, ring_issued, w, p, dst, full, position);
  } else if (panel_stream(g, w)) {
    issue_panel_page(g, ring_issued, w, p - kv_pages, dst, full, position);
  } else {
    const WeightStream ws = slot_stream(w);
    const int rpp = w[W_SLOT_ROWS_PER_PAGE], row0 = (p - kv_pages) * rpp, rows = min(rpp, ws.rows - row0);
    const uint32_t row_bytes = ws.row_bytes();
    tk::arrive_expect_tx(full, rows * row_bytes);
    tk::store_release_shared(ring_issued, position + 1);  // after arming: see wait_page_issued
    MK_ROLLED
    for (int r = 0; r < rows; ++r)
      tk::bulk_load<tk::cache_hint::evict_first>(dst + r * row_bytes, ws.row(row0 + r), row_bytes, full);
  }
}

// out[out_row0 + r] = W[r] . x for the `rows` rows of one panel page (K columns; x bf16 in shared memory).
__device__ __forceinline__ void dot_panel_page(uint32_t page_addr, int rows, int rpp, int K, uint32_t x_addr,
                                               float* out, int out_row0) {
  const int lane = tk::lane_id(), g = lane >> 2, t = lane & 3;
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lchunk = lane >> 4;  // this lane's ldmatrix row, k half
  for (int m0 = 0; m0 < rows; m0 += 32) {  // two m-tiles per pass: two independent mma chains
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    for (int c = 0; c < K / PANEL_COLS; ++c) {
      const uint32_t panel = page_addr + c * rpp * 128;
#pragma unroll
      for (int j = 0; j < PANEL_COLS / 16; ++j) {
        // B: x's 16 columns k..k+15 in column 0 (lanes 0-3), zeros elsewhere.
        const uint32_t xk = x_addr + (uint32_t)(c * PANEL_COLS + 16 * j + 2 * t) * 2;
        const uint32_t b0 = g == 0 ? tk::load_shared_u32(xk) : 0u, b1 = g == 0 ? tk::load_shared_u32(xk + 16) : 0u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + 16 * h + lrow, chunk = 2 * j + lchunk;
          uint32_t a[4];
          tk::ldmatrix_x4_shared(a, panel + row * 128 + ((chunk ^ (row & 7)) << 4));
          tk::detail::mma_16x8x16_acc(acc[h], a, b0, b1);
        }
      }
    }
    if (t == 0) {  // D's column 0: rows g (entry 0) and g + 8 (entry 2) of each m-tile
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + 16 * h + g;
        if (r < rows) out[out_row0 + r] = acc[h][0];
        if (r + 8 < rows) out[out_row0 + r + 8] = acc[h][2];
      }
    }
  }
}

// The consumers' side of a panel stream: weight page p to warp p % 8 (after any KV pages the cursor has
// already passed), rows to shared `out`. Mirrors consume_pages (consumer_matvec.cuh). False: a wait failed.
__device__ __noinline__ bool consume_panel_pages(const Globals& g, const Shared sm, const int* instr) {
  const int warp = tk::warp_id(), lane = tk::lane_id();
  const int n_pages = instr[W_SLOT_NUM_PAGES] - instr[W_SLOT_KV_RING_PAGES], rpp = instr[W_SLOT_ROWS_PER_PAGE];
  const int rows_total = instr[W_SLOT_STREAM + 2], K = instr[W_SLOT_STREAM + 3];
  bool ok = true;
  RingWalk walk(sm, warp);
  for (int p = warp; p < n_pages; p += NUM_CONSUMER_WARPS) {
    const uint32_t n = walk.pos0 + p, ring = walk.ring;
    if (ok) ok = wait_page_issued(g, sm, n, instr);
    if (ok) ok = wait_pipeline(g, sm.page_full[ring], walk.round & 1, instr, SITE_CONSUMER_PAGE_FULL, n);
    ok = __all_sync(tk::FULL_MASK, ok);  // the warp's mma below need every lane
    if (p == n_pages - 1 && lane == 0) timing_mark(g, instr, MARK_LAST_PAGE);
    if (p == 0 && lane == 0) timing_mark(g, instr, MARK_FIRST_PAGE);
    if (ok)
      dot_panel_page(tk::smem_addr(sm.page(ring)), min(rpp, rows_total - p * rpp), rpp, K, tk::smem_addr(sm.x), sm.out,
                     p * rpp);
    __syncwarp();
    if (lane == 0 && p < n_pages - g.defer_free_pages) tk::arrive(sm.page_empty[ring]);  // else held (consumer.cuh)
    if (p == n_pages - 1 && lane == 0) timing_mark(g, instr, MARK_LAST_DONE);
    walk.next();
  }
  const bool all_ok = consumer_all(ok);  // also the barrier before the epilogue reads shared `out`
  if (threadIdx.x == 0) {
    walk.finish(sm, n_pages);
    timing_mark(g, instr, MARK_COMPUTED);
  }
  return all_ok;
}

}  // namespace mk::vm
