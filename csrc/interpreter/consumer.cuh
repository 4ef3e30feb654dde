// consumer.cuh: the consumer warps' instruction loop: take the next fetched instruction, wait for
// its dependencies (acquire), run it (its opcode's code: ops/dispatch.cuh execute), then signal its counter
// (release) once its outputs are visible.
#pragma once

#include "ops/dispatch.cuh"

namespace mk::vm {

// Thread 0 alone spins on every wait (the caller's barrier then orders the other consumers' loads behind
// its acquire loads). False: the watchdog fired or another block aborted.
__device__ __forceinline__ bool wait_all_dependencies(const Globals& g, const int* w) {
  bool ok = true;
  const int n = w[W_NUM_WAITS];
  for (int k = 0; k < n && ok; ++k) ok = wait_dependency(g, w, w[W_WAITS + 2 * k], w[W_WAITS + 2 * k + 1]);
  return ok;
}

// The op's last Globals::defer_free_pages ring pages are freed only after its release: while a page is
// held the loader cannot start another copy, and the release fence waits behind the SM's copies in flight
// (the epilogue of a weight-streaming op measured 2.3-3 µs against attention's 1.1 µs, which freed no page;
// 1.0-1.7 µs with the pages held). D <= 8 < ring pages, so no page the op itself needs waits on a held
// one. Positions end - n .. end - 1 are the op's (thread 0 moved the cursor past them).
__device__ __forceinline__ void free_deferred_pages(const Globals& g, const Shared& sm, int n_pages) {
  const int held = min(g.defer_free_pages, n_pages);
  const uint32_t end = sm.ring_cursor[0], R = sm.ring_pages;
  for (int k = n_pages - held; k < n_pages; ++k) tk::arrive(sm.page_empty[(end - n_pages + k) % R]);
}

template <bool TIMING, int V>
__device__ __forceinline__ void run_consumers(const Globals& g, const Shared& sm) {
  for (int i = 0;; ++i) {
    const int slot = i % NUM_SLOTS;
    // Each thread waits for the slot itself; thread 0 then waits for the dependencies, and ONE barrier
    // (a reduction: every consumer thread must leave together, a lone leaver would strand the others on a
    // barrier) both orders every consumer's loads behind thread 0's acquire and says whether all waits held.
    const bool slot_ok = wait_pipeline(g, sm.slot_full[slot], (i / NUM_SLOTS) & 1, nullptr, SITE_CONSUMER_SLOT_FULL, i);
    // The words are read in place: the controller rewrites this slot only after the consumers' slot_free
    // arrival below (a local copy of the 32 words lived in local memory, indexed at run time).
    const int* w = sm.slot(slot);
    long long t_start = 0, t_ready = 0;
    if constexpr (TIMING) t_start = (long long)tk::globaltimer();
    int* progress = g.progress + blockIdx.x * PROGRESS_WORDS;
    bool ok = slot_ok;
    if (threadIdx.x == 0 && slot_ok && !ends_queue(w)) {
      set_low_cap_from(sm, is_chain_op(w[W_OPCODE]) ? (uint32_t)(i + g.chain_cap_ahead)
                           : g.low_cap_inputs          ? (uint32_t)i
                                                       : NO_LOW_CAP);
      progress[0] = w[W_ID];
      progress[1] = STAGE_WAITING;
      progress[2] = (int)sm.ring_cursor[0];
      ok = wait_all_dependencies(g, w);
    }
    if (!consumer_all(ok) || ends_queue(w)) return;
    if constexpr (TIMING) t_ready = (long long)tk::globaltimer();
    if (threadIdx.x == 0) progress[1] = STAGE_RUNNING;
    ok = execute<V>(g, sm, w);
    consumer_sync();  // every consumer's global writes happen before the release below
    if (!ok) return;
    if (threadIdx.x == 0) {
      // No extra fence: the barrier above orders every consumer's writes before this thread's release,
      // and release is cumulative in the PTX memory model (the same pattern as CUTLASS's barriers).
      const int id = w[W_ID];  // the slot may be rewritten once it is freed
      if (w[W_SIGNAL_COUNTER] >= 0) tk::signal_add(g.counters + w[W_SIGNAL_COUNTER], w[W_SIGNAL_AMOUNT]);
      free_deferred_pages(g, sm, w[W_SLOT_NUM_PAGES]);
      tk::arrive(sm.slot_free[slot]);
      progress[1] = STAGE_SIGNALLED;
      if constexpr (TIMING) {
        long long* rec = g.timing + (long long)id * TIMING_WORDS;
        rec[0] = t_start;
        rec[1] = t_ready;
        rec[2] = (long long)tk::globaltimer();
        rec[3] = (long long)tk::smid();
      }
    }
  }
}

}  // namespace mk::vm
