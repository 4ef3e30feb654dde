// kv_stream.cuh: the earlier keys and values of an attention instruction (ATTN_PARTIAL, ATTN_O_PROJ: the two
// opcodes this helper serves, named here; both put the sequence and the KV group in their first two operands)
// as a stream of ring pages; the consumer side is attention_ring.cuh. The controller decides and derives the
// stream when it fetches the instruction (its step-args reads are off the critical path: it runs instructions
// ahead); the loader copies each KV page's keys and values with two bulk copies, through the sequence's block
// table.
#pragma once

#include "code_size.cuh"

#include "../tk/tma.cuh"
#include "state.cuh"

namespace mk::vm {

// Controller, one lane, after store_slot_stream: the KV words of the slot (opcodes.cuh, W_SLOT_KV_*).
// The ring path needs one new token for the sequence (decode): its key is the only one this step
// writes, so every other key of its split can be loaded before the dependency wait. A stale copy of
// the new token's slot may land in the ring with its page; the consumers never read it.
// ATTN_O_PROJ (the fused path: one split of all the group's keys) puts its KV pages ahead of its W_o pages.
__device__ __forceinline__ void derive_kv_stream(const Globals& g, int* slot) {
  slot[W_SLOT_KV_MODE] = 0;
  slot[W_SLOT_KV_RING_PAGES] = 0;
  const int op = slot[W_OPCODE];
  if (!g.attn_kv_ring || (op != OP_ATTN_PARTIAL && op != OP_ATTN_O_PROJ)) return;
  const StepArgs sa(g);
  const bool fused = op == OP_ATTN_O_PROJ;
  const int s = slot[W_OPERANDS], split = fused ? 0 : slot[W_OPERANDS + 2], nsplit = fused ? 1 : slot[W_OPERANDS + 3];
  if (s < 0) return;  // a spread unit with no work (query_units.cuh)
  const int ps = sa.page_size(), kvpp_max = PAGE_BYTES / (2 * ps * g.head_dim * 2);
  if (kvpp_max == 0) return;  // one KV page's keys and values do not fit a ring page
  const int q_first = sa.query_start(s), q_last = sa.live_end(s), C = sa.context_len(s);
  if (q_last - q_first != 1) return;
  const int pos = sa.position(q_first), new_slot = sa.slot(q_first);
  // The split's keys, as attend() computes them (attention_global.cuh).
  const int P = (C + ps - 1) / ps;
  const int key_begin = (split * P / nsplit) * ps, key_end = min(((split + 1) * P / nsplit) * ps, C);
  const int ring_end = max(key_begin, min(key_end, pos));
  const int n_kv = (ring_end - key_begin + ps - 1) / ps;
  // Short contexts: one KV page per ring page, so the pages spread over the warps; long ones fill pages.
  const int kvpp = min(kvpp_max, max(1, (n_kv + NUM_CONSUMER_WARPS - 1) / NUM_CONSUMER_WARPS));
  const int ring_pages = (n_kv + kvpp - 1) / kvpp;
  slot[W_SLOT_NUM_PAGES] += ring_pages;  // after the weight pages store_slot_stream counted (none for ATTN_PARTIAL)
  slot[W_SLOT_KV_RING_PAGES] = ring_pages;
  slot[W_SLOT_KV_PAGE_LO] = key_begin / ps;
  slot[W_SLOT_KV_PAGES] = n_kv;
  slot[W_SLOT_KV_RING_END] = ring_end;
  slot[W_SLOT_KV_NEW_KEY] = pos >= key_begin && pos < key_end ? pos : -1;
  slot[W_SLOT_KV_NEW_SLOT] = new_slot;
  slot[W_SLOT_KV_TOKEN] = q_first;
  slot[W_SLOT_KV_MODE] = kvpp;
}

// KV pages are re-read by the other query-head instructions of their group in the same step.
inline constexpr tk::cache_hint KV_HINT = tk::cache_hint::normal;

// Loader lane: arm ring page p of w's KV stream on `full` (publishing position `position` as issued)
// and copy its KV pages' keys and values into dst.
__device__ __forceinline__ void issue_kv_page(const Globals& g, uint32_t* ring_issued, const int* w, int p, uint8_t* dst,
                                              tk::semaphore& full, uint32_t position) {
  const StepArgs sa(g);
  const int kvpp = w[W_SLOT_KV_MODE], ps = sa.page_size();
  const int first = w[W_SLOT_KV_PAGE_LO] + p * kvpp, n = min(kvpp, w[W_SLOT_KV_PAGES] - p * kvpp);
  const uint32_t chunk = ps * g.head_dim * 2;
  tk::arrive_expect_tx(full, n * 2 * chunk);
  tk::store_release_shared(ring_issued, position + 1);  // after arming: see wait_page_issued
  const int s = w[W_OPERANDS], grp = w[W_OPERANDS + 1], layer = w[W_LAYER];
  MK_ROLLED
  for (int i = 0; i < n; ++i) {  // the loader runs on one lane (roles.cuh)
    const int block = sa.block(s, first + i);
    const long long at = (((long long)layer * g.kv_num_pages + block) * g.n_kv + grp) * ps * g.head_dim;
    tk::bulk_load<KV_HINT>(dst + i * 2 * chunk, g.k_cache + at, chunk, full);
    tk::bulk_load<KV_HINT>(dst + i * 2 * chunk + chunk, g.v_cache + at, chunk, full);
  }
}

}  // namespace mk::vm
