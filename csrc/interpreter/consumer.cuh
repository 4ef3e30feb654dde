// consumer.cuh: the consumer warps' instruction loop: take the next fetched instruction, wait for
// its dependencies (acquire), run it, then signal its counter (release) once its outputs are visible.
#pragma once

#include "ops_attention.cuh"
#include "ops_attn_o_proj.cuh"
#include "ops_matvec.cuh"

namespace mk::vm {

// Thread 0 alone spins on every wait (the caller's barrier then orders the other consumers' loads behind
// its acquire loads). False: the watchdog fired or another block aborted.
__device__ __forceinline__ bool wait_all_dependencies(const Globals& g, const int* w) {
  bool ok = true;
  const int n = w[W_NUM_WAITS];
  for (int k = 0; k < n && ok; ++k) ok = wait_dependency(g, w, w[W_WAITS + 2 * k], w[W_WAITS + 2 * k + 1]);
  return ok;
}

// V: the kernel variant (config.cuh KernelVariant); a batch-1 variant runs only its paths (state.cuh
// variant_mismatch for the rest).
template <int V>
__device__ __forceinline__ bool execute(const Globals& g, const Shared& sm, const int* w) {
  constexpr bool B1 = V != VARIANT_GENERAL, SPLIT = V != VARIANT_BATCH1_FUSED, FUSED = V != VARIANT_BATCH1_SPLIT;
  // A batch-1 variant's ops take the step as one token of one sequence (state.cuh token_index): any other step
  // is the host's mistake, caught here before an op reads or writes anything.
  if constexpr (B1) {
    if (g.sa_header[SA_NUM_TOKENS] != 1 || g.sa_header[SA_NUM_SEQS] != 1) return variant_mismatch(g, w);
  }
  switch (w[W_OPCODE]) {
    case OP_EMBED: op_embed(g, w); return true;
    case OP_RMS_QKV_ROPE_APPEND: return op_qkv<B1>(g, sm, w);
    case OP_ATTN_PARTIAL: if constexpr (SPLIT) return op_attn_partial<B1>(g, sm, w); else return variant_mismatch(g, w);
    case OP_ATTN_REDUCE: if constexpr (SPLIT) { op_attn_reduce(g, w); return true; } else return variant_mismatch(g, w);
    case OP_O_PROJ_RESIDUAL: if constexpr (SPLIT) return op_o_proj<B1>(g, sm, w); else return variant_mismatch(g, w);
    case OP_ATTN_O_PROJ: if constexpr (FUSED) return op_attn_o_proj<B1>(g, sm, w); else return variant_mismatch(g, w);
    case OP_RMS_GATE_UP_SILU: return op_gate_up<B1>(g, sm, w);
    case OP_DOWN_RESIDUAL: return op_down<B1>(g, sm, w);
    case OP_LM_HEAD: return op_lm_head<B1>(g, sm, w);
    case OP_ARGMAX_REDUCE: op_argmax(g, sm, w); return true;
    default:
      if (threadIdx.x == 0) record_error(g, ERR_BAD_OPCODE, w, -1, 0, 0);
      return false;
  }
}

// The op's last Globals::defer_free_pages ring pages are freed only after its release: while a page is
// held the loader cannot start another copy, and the release fence waits behind the SM's copies in flight
// (the epilogue of a weight-streaming op measured 2.3-3 µs against attention's 1.1 µs, which freed no page;
// 1.0-1.7 µs with the pages held: docs/BENCHMARKS.md, eighth session). D <= 8 < ring pages, so no page
// the op itself needs waits on a held one. Positions end - n .. end - 1 are the op's (thread 0 moved the
// cursor past them).
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
    if (threadIdx.x == 0 && slot_ok && w[W_OPCODE] != OP_NOOP) {
      set_low_cap_from(sm, is_chain_op(w[W_OPCODE]) ? (uint32_t)(i + g.chain_cap_ahead)
                           : g.low_cap_inputs          ? (uint32_t)i
                                                       : NO_LOW_CAP);
      progress[0] = w[W_ID];
      progress[1] = STAGE_WAITING;
      progress[2] = (int)sm.ring_cursor[0];
      ok = wait_all_dependencies(g, w);
    }
    if (!consumer_all(ok) || w[W_OPCODE] == OP_NOOP) return;
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
