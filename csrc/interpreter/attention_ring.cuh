// attention_ring.cuh: decode attention whose earlier keys and values arrive through the page ring (the
// ring path of ATTN_PARTIAL and ATTN_O_PROJ).
//
// Attention of a new token over keys written by earlier steps needs nothing from this step, yet read
// from global memory after the dependency wait those keys cost a loaded round trip on every layer's
// critical path (the "key loop", ≈ 3.5 µs of a 6 µs op). The controller therefore turns such an
// attention into a stream of KV pages (kv_stream.cuh) that the loader copies into the ring ahead of
// time, like weight rows; after the wait only the queries and the new token's own key and value row
// (written by this step's QKV) are read from global memory, in one round trip.
#pragma once

#include "code_size.cuh"

#include "attention_math.cuh"
#include "attention_pass.cuh"
#include "marks.cuh"
#include "state.cuh"

namespace mk::vm {

// Consumer warps take the stream's KV ring pages round-robin (page p: warp p % 8); each holds
// W_SLOT_KV_MODE KV pages, each its keys [page_size][hd] then its values. The new key goes to the first
// warp without a ring page when there is one. emit as in attend (attention_global.cuh). False: a page wait
// failed. A fused op's weight pages follow its KV pages; the stream's last Globals::defer_free_pages
// positions stay held either way.
// A stream of at most one ring page per warp (a short context) folds by (KV page, head) instead
// (Globals::attn_head_units): a warp's fold is one head after another, so with ring pages a warp each the
// 9-16 KV pages of a 129-256-token context left three warps idle and five folding two pages of every head;
// the pairs spread over all eight, every page is held until the last warp's fold (all fit the ring at once:
// MIN_RING_PAGES > NUM_CONSUMER_WARPS) and freed after the barrier that ends the folds. Where the pages
// already fill the warps evenly (a multiple of 8 KV pages) each warp keeps its page, waiting for no other.
// Not inlined (like consume_pages, `sm` by value): inlined into the opcode switch its registers raised
// the whole kernel's spills from 32 to 88 bytes.
template <int DPL, typename Emit>
__device__ __noinline__ bool attend_ring(const Globals& g, const Shared sm, const int* w, Emit emit) {
  const StepArgs sa(g);
  // Operands: ATTN_PARTIAL seq, group, split, nsplit, h_begin, h_end; ATTN_O_PROJ seq, group, h_begin, h_end, ...
  const int hw = w[W_OPCODE] == OP_ATTN_O_PROJ ? W_OPERANDS + 2 : W_OPERANDS + 4, grp = w[W_OPERANDS + 1];
  const int layer = w[W_LAYER], NH = w[hw + 1] - w[hw], hd = g.head_dim, ps = sa.page_size();
  const int head0 = grp * (g.n_heads / g.n_kv) + w[hw], t = w[W_SLOT_KV_TOKEN];
  const int n_pages = w[W_SLOT_KV_RING_PAGES], kvpp = w[W_SLOT_KV_MODE];
  const int keep_from = w[W_SLOT_NUM_PAGES] - g.defer_free_pages;  // stream positions held past the release
  const int key0 = w[W_SLOT_KV_PAGE_LO] * ps, ring_end = w[W_SLOT_KV_RING_END], new_key = w[W_SLOT_KV_NEW_KEY];
  const int warp = tk::warp_id(), lane = tk::lane_id();
  const float scale = attn_scale(g);
  const int stride_w = NH * (hd + 2), chunk = ps * hd * 2;  // chunk: bytes of one KV page's keys
  float* merge = sm.x;                                      // [warp][h][hd + 2] (attention_math.cuh)
  float* q_sh = sm.x + NUM_CONSUMER_WARPS * stride_w;       // [h][hd]
  const uint32_t q_addr = tk::smem_addr(q_sh);
  // The one round trip after the wait: queries and the new key's row, issued together. The new key stays
  // in registers (its fold waits for it after the ring pages, so the barrier below does not).
  MK_ROLLED
  for (int i = threadIdx.x; i < NH * hd; i += CONSUMER_THREADS)
    q_sh[i] = load_cg(g.q + (long long)t * g.n_heads * hd + head0 * hd + i);
  // By pairs where that shortens the busiest warp's folds: ring pages of kvpp KV pages, a warp each, give it
  // kvpp * NH of them; the pairs spread, ceil(n_kv * NH / 8).
  const int n_kv = w[W_SLOT_KV_PAGES];
  const bool by_head = g.attn_head_units && NH > 1 && n_pages <= NUM_CONSUMER_WARPS &&
                       (n_kv * NH + NUM_CONSUMER_WARPS - 1) / NUM_CONSUMER_WARPS < kvpp * NH;
  const int units = by_head ? n_kv * NH : n_pages;
  const int new_warp = units % NUM_CONSUMER_WARPS;  // the first warp with the fewest pages or pairs
  float nk[1][DPL], nv[1][DPL];
  bool new_valid[1] = {false};
  if (warp == new_warp && new_key >= 0) {
    const int slot = w[W_SLOT_KV_NEW_SLOT];
    const long long row = ((((long long)layer * g.kv_num_pages + slot / ps) * g.n_kv + grp) * ps + slot % ps) * hd;
    load_head_dims<DPL>(g.k_cache + row + lane * DPL, nk[0]);
    load_head_dims<DPL>(g.v_cache + row + lane * DPL, nv[0]);
    new_valid[0] = true;
  }
  reset_merge_slot<DPL>(merge + warp * stride_w, NH, hd);
  consumer_sync();
  if (threadIdx.x == 0) timing_mark(g, w, MARK_INPUT);

  RingWalk walk(sm, warp);  // ring pages p = warp, warp + 8, ... (state.cuh)
  bool ok = true;
  // Warp 0's cycles inside its folds, for a profile (MARK_LAST_PAGE_CYCLES): the rest of its keys' interval waits.
  const bool timed = g.timing != nullptr;
  long long fold_cycles = 0;
  if (by_head) {
    for (int u = warp; u < units; u += NUM_CONSUMER_WARPS) {
      const int i = u / NH, h = u - i * NH, p = i / kvpp;  // KV page i (ring page p), head h
      uint32_t ring, round;
      walk.page(p, ring, round);
      if (ok) ok = wait_page_issued(g, sm, walk.pos0 + p, w);
      if (ok) ok = wait_pipeline(g, sm.page_full[ring], round & 1, w, SITE_CONSUMER_PAGE_FULL, walk.pos0 + p);
      ok = __all_sync(tk::FULL_MASK, ok);
      if (ok) {
        const long long c0 = timed ? clock64() : 0;
        const uint32_t kbase = tk::smem_addr(sm.page(ring)) + (i - p * kvpp) * 2 * chunk;
        const int row_end = min(ps, ring_end - (key0 + i * ps));
        for (int k0 = 0; k0 < row_end; k0 += PASS_KEYS<DPL>)
          fold_pass<DPL>(merge + warp * stride_w + h * (hd + 2), q_addr + h * hd * 4, 1, scale,
                         kbase + k0 * hd * 2, kbase + chunk + k0 * hd * 2, min(PASS_KEYS<DPL>, row_end - k0));
        if (timed) fold_cycles += clock64() - c0;
      }
    }
  }
  for (int p = warp; !by_head && p < n_pages; p += NUM_CONSUMER_WARPS) {
    const uint32_t n = walk.pos0 + p, ring = walk.ring;
    if (ok) ok = wait_page_issued(g, sm, n, w);
    if (ok) ok = wait_pipeline(g, sm.page_full[ring], walk.round & 1, w, SITE_CONSUMER_PAGE_FULL, n);
    ok = __all_sync(tk::FULL_MASK, ok);  // the warp's shuffles below need every lane
    if (ok) {
      const long long c0 = timed ? clock64() : 0;
      const uint32_t page = tk::smem_addr(sm.page(ring));
      const int first_key = key0 + p * kvpp * ps;
      const int n_kv = min(kvpp, (ring_end - first_key + ps - 1) / ps);
      for (int i = 0; i < n_kv; ++i) {
        const uint32_t kbase = page + i * 2 * chunk;
        const int row_end = min(ps, ring_end - (first_key + i * ps));  // valid rows of this KV page
        for (int k0 = 0; k0 < row_end; k0 += PASS_KEYS<DPL>)
          fold_pass<DPL>(merge + warp * stride_w, q_addr, NH, scale, kbase + k0 * hd * 2, kbase + chunk + k0 * hd * 2,
                         min(PASS_KEYS<DPL>, row_end - k0));
      }
      if (timed) fold_cycles += clock64() - c0;
    }
    __syncwarp();
    if (lane == 0 && p < keep_from) tk::arrive(sm.page_empty[ring]);  // else held (consumer.cuh)

    walk.next();
  }
  if (ok && new_valid[0]) fold_keys<DPL, 1>(merge + warp * stride_w, q_sh, NH, hd, scale, nk, nv, new_valid);
  if (threadIdx.x == 0) {
    timing_mark(g, w, MARK_LAST_PAGE);
    if (w[W_OPCODE] == OP_ATTN_PARTIAL) timing_value(g, w, MARK_LAST_PAGE_CYCLES, fold_cycles);  // ATTN_O_PROJ's are its W_o pages
  }
  const bool all_ok = consumer_all(ok);  // also orders every warp's merge slot before the merge
  if (threadIdx.x == 0) {
    if (by_head && all_ok)  // every warp's folds are behind the barrier
      for (int p = 0; p < min(n_pages, keep_from); ++p) {
        uint32_t ring, round;
        walk.page(p, ring, round);
        tk::arrive(sm.page_empty[ring]);
      }
    walk.finish(sm, n_pages);
    timing_mark(g, w, MARK_COMPUTED);
  }
  if (!all_ok) return false;
  merge_warp_states(merge, NH, hd, t, emit);
  return true;
}

}  // namespace mk::vm
