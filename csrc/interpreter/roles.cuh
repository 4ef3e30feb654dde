// roles.cuh: the controller warp (fetches instruction words into shared slots ahead of use, from a
// static per-block queue or by claiming from the dynamic queue) and the loader warp (streams each
// instruction's weight rows into the page ring with TMA bulk copies, evict-first in L2).
//
// The page ring is one FIFO across instructions: instruction i+1's pages are loaded as soon as
// instruction i's consumers free pages, which is what overlaps loads of i+1 with compute of i.
#pragma once

#include "code_size.cuh"

#include "../tk/tma.cuh"
#include "state.cuh"
#include "l2_prefetch.cuh"
#include "marks.cuh"
#include "kv_stream.cuh"
#include "query_units.cuh"
#include "ops/dispatch.cuh"
#include "panel_pages.cuh"
#include "tile_streams.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

// Returns the address of the next instruction's 32 words, or nullptr at the end of the program.
__device__ __forceinline__ const int* next_instruction(const Globals& g, int index) {
  if (g.dynamic_queue) {
    int claimed = 0;
    if (tk::lane_id() == 0) {
      const int period = g.queue_len + (int)gridDim.x;  // every block makes one failing claim
      claimed = atomicAdd(g.queue_head, 1) - g.epoch * period;
    }
    claimed = __shfl_sync(tk::FULL_MASK, claimed, 0);
    if (claimed < 0) {  // the queue head is behind this launch's epoch: never index before the queue
      if (tk::lane_id() == 0) record_error(g, ERR_QUEUE_EPOCH, nullptr, -1, g.epoch, claimed);
      return nullptr;
    }
    return claimed < g.queue_len ? g.instructions + (long long)claimed * WORDS : nullptr;
  }
  if (index >= g.queue_len) return nullptr;
  const int* w = g.instructions + ((long long)blockIdx.x * g.queue_len + index) * WORDS;
  return ends_queue(w) ? nullptr : w;
}

__device__ void run_controller(const Globals& g, const Shared& sm) {
  const int lane = tk::lane_id();
  for (int i = 0;; ++i) {
    const int slot = i % NUM_SLOTS;
    const uint32_t round = i / NUM_SLOTS;
    if (!__all_sync(tk::FULL_MASK, wait_pipeline(g, sm.slot_free[slot], (round & 1) ^ 1, nullptr, SITE_CONTROLLER_SLOT_FREE, i))) return;  // the whole warp leaves together
    const int* w = next_instruction(g, i);
    int* dst = sm.slots + slot * SLOT_WORDS;
    dst[lane] = w ? __ldcg(w + lane) : (lane == W_OPCODE ? OP_NOOP : 0);
    __syncwarp();
    resolve_query_unit(g, dst);  // before the KV stream is derived from the slot's sequence
    // The slot-only words (opcodes.cuh): the weight stream, derived here where the opcode switch and the
    // divisions cost nothing, instead of by the loader and, on the critical path, by the consumers
    // (ops/dispatch.cuh: each opcode's own description).
    const WeightStream ws = weight_stream(g, dst);
    if (lane == 0) {
      store_slot_stream(dst, ws);
      skip_dead_tile(g, dst);
      derive_kv_stream(g, dst);  // after the stream words: a KV stream overrides the page count
    }
    __syncwarp();
    if (lane == 0) tk::arrive(sm.slot_full[slot]);
    if (!w) return;
    prefetch_rows_l2(ws, 0, g.l2_prefetch_bytes, lane, 32);
  }
}

// L2 policy of weight loads: streamed once per token, so evict them first. (A stall once suspected of
// coming from this policy reproduces with the normal policy too.)
inline constexpr tk::cache_hint WEIGHT_HINT = tk::cache_hint::evict_first;

// Before the loader exits (end of the queue or an abort) wait until every copy it issued has landed,
// i.e. the page_full phase of its last min(R, loaded) positions completed (R = ring pages): a block must never
// exit while a bulk copy still targets its shared memory and barriers. This ignores the abort flag on
// purpose and is bounded by the watchdog time. (Position n + R was never issued, so the parity
// of position n is unambiguous.)
__device__ __forceinline__ void drain_copies(const Globals& g, const Shared& sm, uint32_t loaded) {
  const uint32_t R = sm.ring_pages, first = loaded > R ? loaded - R : 0;
  const uint64_t start = tk::globaltimer();
  MK_ROLLED
  for (uint32_t n = first; n < loaded; ++n)
    while (!tk::try_wait(sm.page_full[n % R], (n / R) & 1))
      if (tk::globaltimer() - start > static_cast<uint64_t>(g.timeout_ns)) return;
}

// One lane: the loader's work is one copy per page (a few for strided rows or KV pages), and its per-page path
// is on the critical path wherever the in-flight cap binds; lane 0 alone runs it without warp votes, warp
// barriers or the election loops a lane-0 copy inside a full warp compiles to. The other lanes leave at once
// (no warp-collective operation follows).
__device__ void run_loader(const Globals& g, const Shared& sm) {
  if (tk::lane_id() != 0) return;
  uint32_t page_counter = 0;  // pages loaded since launch
  const uint32_t R = sm.ring_pages;
  uint32_t ring = 0, round = 0;  // page_counter % R and / R, advanced without a division per page
  for (int i = 0;; ++i) {
    const int slot = i % NUM_SLOTS;
    if (!wait_pipeline(g, sm.slot_full[slot], (i / NUM_SLOTS) & 1, nullptr, SITE_LOADER_SLOT_FULL, i)) {
      drain_copies(g, sm, page_counter);  // leave after its copies landed
      return;
    }
    const int* w = sm.slot(slot);
    if (ends_queue(w)) {
      drain_copies(g, sm, page_counter);
      return;
    }
    const WeightStream ws = slot_stream(w);
    g.progress[blockIdx.x * PROGRESS_WORDS + 3] = (int)page_counter;
    g.progress[blockIdx.x * PROGRESS_WORDS + 4] = w[W_ID];
    const int n_pages = w[W_SLOT_NUM_PAGES], rpp = w[W_SLOT_ROWS_PER_PAGE];
    // An attention's earlier keys (kv_stream.cuh), then a fused op's W_o pages (panel_pages.cuh).
    const bool kv_stream = w[W_SLOT_KV_MODE] != 0;
    if (n_pages > (int)R && ((g.l2_beyond_ring_ops >> w[W_OPCODE]) & 1))
      prefetch_rows_l2(ws, R * rpp, g.l2_beyond_ring_bytes, 0, 1);
    for (int p = 0; p < n_pages; ++p) {
      if (!wait_pipeline(g, sm.page_empty[ring], (round & 1) ^ 1, w, SITE_LOADER_PAGE_EMPTY, page_counter)) {
        drain_copies(g, sm, page_counter);
        return;
      }
      // Cap on copies in flight: wait until position n - cap has landed before issuing n. Every SM's
      // outstanding copies queue in the same memory system as the latency-bound reads of the critical
      // path (norm inputs, residuals, KV); beyond the bandwidth-delay product they only add queueing.
      // (n - cap + R > n is not issued yet, so that position's parity is unambiguous.)
      // While the consumers run a latency-bound op (QKV, attention, O-proj) the copies (the MLP's next
      // pages) may get a lower cap of their own (Globals::chain_inflight_pages; 0: the same cap).
      const int cap = low_cap(sm, i) && g.chain_inflight_pages > 0 ? g.chain_inflight_pages : g.max_inflight_pages;
      if (cap > 0 && cap < (int)R && page_counter >= (uint32_t)cap) {
        const uint32_t old = page_counter - cap, old_ring = ring >= (uint32_t)cap ? ring - cap : ring + R - cap;
        const uint32_t old_round = ring >= (uint32_t)cap ? round : round - 1;
        if (!wait_pipeline(g, sm.page_full[old_ring], old_round & 1, w, SITE_LOADER_INFLIGHT_CAP, old)) {
          drain_copies(g, sm, page_counter);
          return;
        }
      }
      g.progress[blockIdx.x * PROGRESS_WORDS + 5] = (int)page_counter;  // exact position
      uint8_t* dst = sm.page(ring);
      if (kv_stream) {
        issue_kv_stream_page(g, sm.ring_issued, w, p, dst, sm.page_full[ring], page_counter);
      } else if (tile_stream(w)) {
        issue_tile_page(g, sm.ring_issued, w, p, dst, sm.page_full[ring], page_counter);
      } else {
        const int row0 = p * rpp;
        const int rows = min(rpp, ws.rows - row0);
        const uint32_t row_bytes = ws.row_bytes();
        tk::arrive_expect_tx(sm.page_full[ring], rows * row_bytes);
        tk::store_release_shared(sm.ring_issued, page_counter + 1);  // after arming: see wait_page_issued
        if (ws.row_stride == ws.row_elems) {  // contiguous rows: one copy
          tk::bulk_load<WEIGHT_HINT>(dst, ws.row(row0), rows * row_bytes, sm.page_full[ring]);
        } else {  // strided rows (a K-slice of W_down): one copy per row
          MK_ROLLED
          for (int r = 0; r < rows; ++r)
            tk::bulk_load<WEIGHT_HINT>(dst + r * row_bytes, ws.row(row0 + r), row_bytes, sm.page_full[ring]);
        }
      }
      if (p == n_pages - 1) timing_mark(g, w, MARK_LOADER);
      ++page_counter;
      if (++ring == R) {
        ring = 0;
        ++round;
      }
    }
    tk::arrive(sm.slot_free[slot]);
  }
}

}  // namespace mk::vm
