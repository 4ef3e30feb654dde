// tile_matmul.cuh: TILE_MATMUL's products (engine/instructions/ops/tile_matmul.py): which accumulators each consumer
// thread holds, a K step's wgmma, and the consumers' page loop over a tile's K steps (single pages, or pairs), its
// inputs staged as tile_streams.cuh lays them out.
#pragma once

#include "code_size.cuh"

#include "../tk/wgmma.cuh"
#include "marks.cuh"
#include "state.cuh"
#include "tile_streams.cuh"

namespace mk::vm {

// Which products a consumer thread holds (tk::wgmma_m64n64k16_bf16's layout, tokens as rows and weight rows as
// columns): acc[j][2 h + e] is token tok0 + lane / 4 + 8 h at page row row0 + 8 j + 2 (lane % 4) + e.
// Narrow: warpgroup wg takes page rows 64 wg .. 64 wg + 63 for every token; wide: tokens 64 wg .. 64 wg + 63 for every
// row. `active`: the tile has rows (narrow) or tokens (wide) there.
struct TileLanes {
  int wg, row0, tok0;
  bool active;
  __device__ __forceinline__ TileLanes(int warp, const TileOperands& t)
      : wg(warp / 4), row0(t.wide() ? 0 : 64 * wg), tok0((t.wide() ? 64 * wg : 0) + 16 * (warp % 4)),
        active(64 * wg < (t.wide() ? t.tokens : t.rows)) {}
};

// The four wgmma of one K step (a, b: the input's and the page's descriptors) into acc, inside the caller's group.
template <bool WIDE>
__device__ __forceinline__ void tile_k_step(uint64_t a, uint64_t b, float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
#pragma unroll
  for (int kk = 0; kk < TILE_K / 16; ++kk) {
    if constexpr (WIDE) {
      tk::wgmma_m64n128k16_bf16(acc, a + 2 * kk, b + 2 * kk);
    } else {
      tk::wgmma_m64n64k16_bf16(acc, a + 2 * kk, b + 2 * kk);
    }
  }
}

// This warpgroup's products of one K step: acc += its 64 tokens of the input at a_addr (64 x TILE_K) times the page's
// rows at b_addr (narrow: its 64 rows; wide: all 128), four wgmma of 16 columns, committed as one group (the caller
// waits). Both warpgroups multiply whether or not the tile has rows (narrow) or tokens (wide) in the second's half
// (those products are never read): a branch around wgmma makes ptxas serialise every product (C7520).
template <bool WIDE>
__device__ __forceinline__ void tile_step_products(uint32_t a_addr, uint32_t b_addr,
                                                   float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
  tk::wgmma_fence();
  tile_k_step<WIDE>(tk::wgmma_desc_sw128(a_addr), tk::wgmma_desc_sw128(b_addr), acc);
  tk::wgmma_commit();
}

// ... of a pair of K steps (a_addr0 / b_addr0, then a_addr1 / b_addr1): eight wgmma committed as one group.
template <bool WIDE>
__device__ __forceinline__ void tile_pair_products(uint32_t a_addr0, uint32_t b_addr0, uint32_t a_addr1,
                                                   uint32_t b_addr1, float (&acc)[TILE_N_BLOCKS<WIDE>][4]) {
  tk::wgmma_fence();
  tile_k_step<WIDE>(tk::wgmma_desc_sw128(a_addr0), tk::wgmma_desc_sw128(b_addr0), acc);
  tile_k_step<WIDE>(tk::wgmma_desc_sw128(a_addr1), tk::wgmma_desc_sw128(b_addr1), acc);
  tk::wgmma_commit();
}

// ... of a tall tile's K step: the input's stage at a_addr times the step's two pages (b_addr0: rows 0..127 into acc,
// b_addr1: the rest into acc_hi), eight wgmma committed as one group.
__device__ __forceinline__ void tile_tall_products(uint32_t a_addr, uint32_t b_addr0, uint32_t b_addr1,
                                                   float (&acc)[TILE_N_BLOCKS<true>][4],
                                                   float (&acc_hi)[TILE_N_BLOCKS<true>][4]) {
  tk::wgmma_fence();
  const uint64_t a = tk::wgmma_desc_sw128(a_addr);
  tile_k_step<true>(a, tk::wgmma_desc_sw128(b_addr0), acc);
  tile_k_step<true>(a, tk::wgmma_desc_sw128(b_addr1), acc_hi);
  tk::wgmma_commit();
}

// Whether a tile takes its pages in pairs (KernelOptions.tile_page_pairs): an even number of K steps and at least four
// x stages (a pair's two stages are refilled after the next pair's barrier, so the pair after that
// must already be in flight). Why pairs: a page visit's fixed work (the waits, the CTA barrier, thread 0's release
// and x copy, the products' issue and their wait with nothing overlapping) is about as long as a narrow tile's
// products; a pair pays it once for twice the products.
__device__ __forceinline__ bool tile_takes_pairs(const Globals& g, const Shared& sm, const TileOperands& t) {
  if (!g.tile_page_pairs || t.k_steps % 2 != 0) return false;
  return tile_x_stages(sm, tile_stage_bytes(g, t)) >= 4;
}

// Thread 0, before a tile's page loop: its x stages' barriers, then the first stages' copies.
__device__ __forceinline__ void tile_start_stages(const Globals& g, const Shared& sm, const TileShared& ts,
                                                  const TileOperands& t, const int* w) {
  for (int s = 0; s < ts.n_stages; ++s) tk::init_semaphore(ts.bars[s], 1);
  tk::fence_semaphore_init();
  // The activations were written this step by other SMs' generic stores (ordered before this thread's acquire of
  // the dependency counters); the copies below read them through the async proxy.
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // shared x was last written by generic stores
  for (int s = 0; s < ts.n_stages && s < t.k_steps; ++s) issue_tile_x(g, ts, t, s, s);
  // The input streams with the pages (no separate read to shield): the loader back to its streaming cap.
  timing_mark(g, w, MARK_INPUT);
  set_low_cap_from(sm, NO_LOW_CAP);
}

// Thread 0, after a tile's page loop and its last barrier (its pages freed): the stage barriers back to plain
// memory, the ring cursor at position `next` (slot `ring` of `round`).
__device__ __forceinline__ void tile_end_stages(const Globals& g, const Shared& sm, const TileShared& ts, const int* w,
                                                uint32_t next, uint32_t ring, uint32_t round) {
  for (int s = 0; s < ts.n_stages; ++s) tk::inval_semaphore(ts.bars[s]);  // scratch is plain memory again
  sm.ring_cursor[0] = next;
  sm.ring_cursor[1] = ring;
  sm.ring_cursor[2] = round;
  timing_mark(g, w, MARK_COMPUTED);
}

// The consumers' side of a tile: every page's products into acc (this thread's share, TileLanes). Each page waits
// for its input stage and weight page, then one barrier (everyone's products of the previous page done: its page and
// stage are freed and refilled; no wgmma group stays open across the loop's back edge: that makes ptxas serialise
// every product, C7515).
// A failed wait does not leave the loop: the remaining pages skip their waits and multiply stale shared memory, and
// the tile returns false after it; a return from inside the loop put the products on a path ptxas takes as divergent
// and serialised every wgmma (C7520; measured, H200, 1B: 2.613 against 3.027 ms per batch-32 step without it).
// Frees the pages as matvecs do (consumer_matvec.cuh) and moves the ring cursor. False: a wait failed (recorded).
// WIDE: t.wide() (one loop per form: the products' shapes are the instructions'). PAIRS: tile_takes_pairs (pages
// taken two at a time: one wait per page, one barrier and one group of eight products per pair). TALL: t.tall() (WIDE
// and PAIRS: a pair is one K step's two pages of rows, multiplied with one x stage into acc and acc_hi; acc_hi is
// untouched otherwise).
template <bool WIDE, bool PAIRS, bool TALL = false>
__device__ __forceinline__ bool tile_products(const Globals& g, const Shared& sm, const int* w, const TileOperands& t,
                                              const TileLanes& tl, float (&acc)[TILE_N_BLOCKS<WIDE>][4],
                                              float (&acc_hi)[TILE_N_BLOCKS<WIDE>][4]) {
  static_assert(!TALL || (WIDE && PAIRS), "a tall tile is wide and takes a K step's two pages together");
  const int tid = threadIdx.x;
  const TileShared ts(g, sm, t);
  const int NK = t.k_steps, NP = TALL ? 2 * NK : NK;  // K steps (x stages), ring pages
  const int keep_from = NP - min(g.defer_free_pages, NP);  // later pages: freed after the release
  if (tid == 0) tile_start_stages(g, sm, ts, t, w);
  // Zeroed here rather than by the first product's scale-d: accumulators a wgmma reads undefined make ptxas treat the
  // pipeline as open at this function's call and spill around it (C7510).
#pragma unroll
  for (int j = 0; j < TILE_N_BLOCKS<WIDE>; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[j][e] = 0.f;
      if constexpr (TALL) acc_hi[j][e] = 0.f;
    }
  const uint32_t R = sm.ring_pages, pos0 = sm.ring_cursor[0];
  uint32_t ring = sm.ring_cursor[1], round = sm.ring_cursor[2], prev_ring = 0;
  const uint32_t b_rows = tl.row0 * 128;  // this warpgroup's rows of a page (wide: all, from row 0)
  const uint32_t a_toks = WIDE ? tl.wg * TILE_X_BOX_BYTES : 0;  // this warpgroup's tokens of a stage
  bool ok = true;
  // The input's stages are waited in page order: the next one's index and parity are counters, not p % n_stages and
  // p / n_stages (two divisions by a run-time value per page: 14 % of the page loop's warp samples, ncu, batch 64).
  int wait_s = 0;
  uint32_t wait_parity = 0;
  const auto wait_stage = [&](int p) -> int {
    const int s = wait_s;
    if (ok) ok = wait_pipeline(g, ts.bars[s], wait_parity, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
    if (++wait_s == ts.n_stages) {
      wait_s = 0;
      wait_parity ^= 1;
    }
    return s;
  };
  consumer_sync();  // the stage barriers' initialisation before anyone waits on them
  int stage = 0, prev_stage = 0;  // page p's input stage, page p - 1's
  uint32_t pair_ring0 = 0;
  if constexpr (PAIRS) {
    // NP even, four or more stages (tile_takes_pairs; a tall tile, two or more). Pages p and p + 1 with their stages
    // (a tall tile's: K step p / 2's one); past the barrier the previous pair's products are done, so thread 0 frees
    // its two pages and refills its stages.
    int stage1 = 0, prev_stage1 = 0;
    uint32_t prev_ring1 = 0;
    for (int p = 0; p < NP; p += 2) {
      prev_stage = stage;
      prev_stage1 = stage1;
      stage = wait_stage(TALL ? p / 2 : p);
      if constexpr (!TALL) stage1 = wait_stage(p + 1);
      const uint32_t ring1 = ring + 1 == R ? 0 : ring + 1, round1 = ring + 1 == R ? round + 1 : round;
      if (ok) ok = wait_page_issued(g, sm, pos0 + p + 1, w);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring1], round1 & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p + 1);
      ok = consumer_all(ok);
      if (tid == 0 && ok) {
        if (p == 0) timing_mark(g, w, MARK_FIRST_PAGE);
        if (p + 2 == NP) timing_mark(g, w, MARK_LAST_PAGE);
        if (p >= 2) {
          if (p - 2 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
          if (p - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring1]);
          if constexpr (TALL) {
            if (p / 2 - 1 + ts.n_stages < NK) issue_tile_x(g, ts, t, p / 2 - 1 + ts.n_stages, prev_stage);
          } else {
            if (p - 2 + ts.n_stages < NP) issue_tile_x(g, ts, t, p - 2 + ts.n_stages, prev_stage);
            if (p - 1 + ts.n_stages < NP) issue_tile_x(g, ts, t, p - 1 + ts.n_stages, prev_stage1);
          }
        }
      }
      if constexpr (TALL) {
        tile_tall_products(ts.stages + stage * ts.stage_bytes + a_toks, tk::smem_addr(sm.page(ring)) + b_rows,
                           tk::smem_addr(sm.page(ring1)) + b_rows, acc, acc_hi);
      } else {
        tile_pair_products<WIDE>(ts.stages + stage * ts.stage_bytes + a_toks, tk::smem_addr(sm.page(ring)) + b_rows,
                                 ts.stages + stage1 * ts.stage_bytes + a_toks, tk::smem_addr(sm.page(ring1)) + b_rows,
                                 acc);
      }
      tk::wgmma_wait<0>();
      prev_ring = ring;
      prev_ring1 = ring1;
      ring = ring1 + 1 == R ? 0 : ring1 + 1;
      round = ring1 + 1 == R ? round1 + 1 : round1;
    }
    pair_ring0 = prev_ring;  // the last pair's first page: freed below, after everyone's products
    prev_ring = prev_ring1;
  } else {
    for (int p = 0; p < NP; ++p) {
      prev_stage = stage;
      stage = wait_stage(p);
      if (ok) ok = wait_page_issued(g, sm, pos0 + p, w);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
      // Past this barrier: page p - 1's products are done (its page and input stage free), page p's input is ready (or
      // some thread's wait failed: ok is false for all of them from here on).
      ok = consumer_all(ok);
      if (tid == 0 && ok) {
        if (p == 0) timing_mark(g, w, MARK_FIRST_PAGE);
        if (p == NP - 1) timing_mark(g, w, MARK_LAST_PAGE);
        if (p >= 1 && p - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
        // page p - 1's stage (read by its products) refilled
        if (p >= 1 && p - 1 + ts.n_stages < NP) issue_tile_x(g, ts, t, p - 1 + ts.n_stages, prev_stage);
      }
      tile_step_products<WIDE>(ts.stages + stage * ts.stage_bytes + a_toks, tk::smem_addr(sm.page(ring)) + b_rows, acc);
      tk::wgmma_wait<0>();
      prev_ring = ring;
      if (++ring == R) {
        ring = 0;
        ++round;
      }
    }
  }
  const bool all_ok = consumer_all(ok);  // every product done (x may be reused)
  if (tid == 0) {
    if (PAIRS && NP >= 2 && NP - 2 < keep_from) tk::arrive(sm.page_empty[pair_ring0]);
    if (NP - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
    tile_end_stages(g, sm, ts, w, pos0 + NP, ring, round);
  }
  return all_ok;
}

// A packed tile's consumers (tile_pack: P K steps of at most TILE_PACK_ROWS rows per ring page; narrow, so its rows
// are warpgroup 0's). Each page visit waits for its P stages and its page, then warpgroup wg multiplies the page's
// K steps wg, wg + 2, ... (32 rows each: m64n32k16) into acc's first four column blocks; past the loop warpgroup 1's
// sums are added into warpgroup 0's through shared x, so warpgroup 0 holds the tile's products as tile_products
// leaves them (warpgroup 1 is inactive: the tile has no rows past 64). Stages are refilled as in tile_products, a
// visit's P after the next visit's barrier (tile_pack makes sure 2 P are in flight).
template <int P>
__device__ __forceinline__ bool tile_products_packed(const Globals& g, const Shared& sm, const int* w,
                                                     const TileOperands& t, float (&acc)[TILE_N_BLOCKS<false>][4]) {
  static_assert((P == 2 || P == TILE_PACK_STEPS) && TILE_N_BLOCKS<false> >= 4, "two or four K steps per page");
  constexpr int BOX = TILE_W_BOX_ROWS * TILE_K * 2;  // one K step of the page
  const int tid = threadIdx.x, wg = tk::warp_id() / 4;
  const TileShared ts(g, sm, t);
  const int NK = t.k_steps, NP = NK / P;
  const int keep_from = NP - min(g.defer_free_pages, NP);
  if (tid == 0) tile_start_stages(g, sm, ts, t, w);
#pragma unroll
  for (int j = 0; j < TILE_N_BLOCKS<false>; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  float(&acc4)[4][4] = *reinterpret_cast<float(*)[4][4]>(&acc[0][0]);
  const uint32_t R = sm.ring_pages, pos0 = sm.ring_cursor[0];
  uint32_t ring = sm.ring_cursor[1], round = sm.ring_cursor[2], prev_ring = 0;
  bool ok = true;
  int wait_s = 0, st[P] = {}, prev_st[P] = {};
  uint32_t wait_parity = 0;
  consumer_sync();  // the stage barriers' initialisation before anyone waits on them
  for (int p = 0; p < NP; ++p) {
#pragma unroll
    for (int kk = 0; kk < P; ++kk) {
      prev_st[kk] = st[kk];
      st[kk] = wait_s;
      if (ok) ok = wait_pipeline(g, ts.bars[wait_s], wait_parity, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
      if (++wait_s == ts.n_stages) {
        wait_s = 0;
        wait_parity ^= 1;
      }
    }
    if (ok) ok = wait_page_issued(g, sm, pos0 + p, w);
    if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, pos0 + p);
    ok = consumer_all(ok);  // past it: the previous visit's products are done, its page and stages free
    if (tid == 0 && ok) {
      if (p == 0) timing_mark(g, w, MARK_FIRST_PAGE);
      if (p == NP - 1) timing_mark(g, w, MARK_LAST_PAGE);
      if (p >= 1) {
        if (p - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
#pragma unroll
        for (int kk = 0; kk < P; ++kk)
          if ((p - 1) * P + kk + ts.n_stages < NK) issue_tile_x(g, ts, t, (p - 1) * P + kk + ts.n_stages, prev_st[kk]);
      }
    }
    const uint32_t page = tk::smem_addr(sm.page(ring));
    tk::wgmma_fence();
#pragma unroll
    for (int i = 0; i < P / 2; ++i) {
      const int kk = 2 * i + wg, s = wg ? st[2 * i + 1] : st[2 * i];
      const uint64_t a = tk::wgmma_desc_sw128(ts.stages + s * ts.stage_bytes);
      const uint64_t b = tk::wgmma_desc_sw128(page + kk * BOX);
#pragma unroll
      for (int k16 = 0; k16 < TILE_K / 16; ++k16) tk::wgmma_m64n32k16_bf16(acc4, a + 2 * k16, b + 2 * k16);
    }
    tk::wgmma_commit();
    tk::wgmma_wait<0>();
    prev_ring = ring;
    if (++ring == R) {
      ring = 0;
      ++round;
    }
  }
  const bool all_ok = consumer_all(ok);  // every product done: x's stages are free
  if (tid == 0) {
    if (NP - 1 < keep_from) tk::arrive(sm.page_empty[prev_ring]);
    tile_end_stages(g, sm, ts, w, pos0 + NP, ring, round);
  }
  // Warpgroup 1's sums into warpgroup 0's (the same thread of the other warpgroup holds the same places).
  const int lane128 = tid & 127;
  if (wg == 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sm.x[(4 * j + e) * 128 + lane128] = acc4[j][e];
  }
  consumer_sync();
  if (wg == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc4[j][e] += sm.x[(4 * j + e) * 128 + lane128];
  }
  consumer_sync();  // x is free again for the epilogue's staging
  return all_ok;
}

}  // namespace mk::vm
