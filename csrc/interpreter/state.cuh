// state.cuh: per-block shared state (carved from dynamic shared memory), the step-args view, the
// error record / abort flag, and bounded waits (the watchdog) used by every role.
#pragma once

#include "../tk/atomics.cuh"
#include "../tk/mbarrier.cuh"
#include "config.cuh"
#include "globals.cuh"
#include "opcodes.cuh"

namespace mk::vm {

struct Shared {
  uint8_t* pages;
  float* x;
  float* out;
  float* scratch;
  int* slots;  // [NUM_SLOTS][SLOT_WORDS]: the record's WORDS, then the controller's derived words
  uint32_t* ring_issued;  // pages the loader has armed (arrive.expect_tx done) since launch
  // The consumers' ring cursor: [pages consumed since launch, its ring slot, its round]. Kept in shared
  // memory and advanced by thread 0 after each matvec's closing barrier: as a per-thread variable it lived
  // in local memory (its address went into the not-inlined page loop) and the slot / round took two
  // divisions per instruction on the critical path.
  // ring_cursor[3]: the first instruction whose pages the loader copies under its low in-flight cap
  // (set_low_cap_from; roles.cuh), NO_LOW_CAP for none.
  uint32_t* ring_cursor;
  tk::semaphore* page_full;
  tk::semaphore* page_empty;
  tk::semaphore* slot_full;
  tk::semaphore* slot_free;
  int ring_pages;  // pages in the weight ring (Globals::ring_pages)
  int x_floats;    // floats of x (the rest of the pool)

  __device__ static Shared carve(uint8_t* base, int ring_pages) {
    Shared s;
    s.ring_pages = ring_pages;
    s.x_floats = mk::vm::x_floats(ring_pages);
    s.pages = base + SharedPlan::pages;
    s.x = reinterpret_cast<float*>(base + SharedPlan::pages + ring_pages * PAGE_BYTES);
    s.out = reinterpret_cast<float*>(base + SharedPlan::out);
    s.scratch = reinterpret_cast<float*>(base + SharedPlan::scratch);
    s.slots = reinterpret_cast<int*>(base + SharedPlan::slots);
    s.ring_issued = reinterpret_cast<uint32_t*>(base + SharedPlan::ring_issued);
    s.ring_cursor = s.ring_issued + 1;
    auto* bars = reinterpret_cast<tk::semaphore*>(base + SharedPlan::barriers);
    s.page_full = bars;
    s.page_empty = bars + MAX_RING_PAGES;
    s.slot_full = bars + 2 * MAX_RING_PAGES;
    s.slot_free = bars + 2 * MAX_RING_PAGES + NUM_SLOTS;
    return s;
  }
  __device__ uint8_t* page(int i) const { return pages + i * PAGE_BYTES; }
  __device__ const int* slot(int i) const { return slots + i * SLOT_WORDS; }
};

// Read-only view of the step-args buffer (engine/instructions/step_args.py). The header (shape and
// section offsets) is fixed for a stream's life, so it also travels as a kernel parameter
// (Globals::sa_header): reading it from the parameter bank saves a dependent global load on every
// access, which under full HBM load is a ≈1 µs round trip on the critical path.
struct StepArgs {
  const Globals& g;  // header words read as g.sa_header[constant]: straight from the parameter bank
  __device__ explicit StepArgs(const Globals& globals) : g(globals) {}
  __device__ int num_tokens() const { return g.sa_header[SA_NUM_TOKENS]; }
  __device__ int num_seqs() const { return g.sa_header[SA_NUM_SEQS]; }
  __device__ int max_pages() const { return g.sa_header[SA_MAX_PAGES]; }
  __device__ int page_size() const { return g.sa_header[SA_PAGE_SIZE]; }
  __device__ int token_id(int t) const { return g.step_args[g.sa_header[SA_OFF_TOKEN_IDS] + t]; }
  __device__ int position(int t) const { return g.step_args[g.sa_header[SA_OFF_POSITIONS] + t]; }
  __device__ int slot(int t) const { return g.step_args[g.sa_header[SA_OFF_SLOTS] + t]; }
  __device__ int query_start(int s) const { return g.step_args[g.sa_header[SA_OFF_QUERY_START] + s]; }
  __device__ int context_len(int s) const { return g.step_args[g.sa_header[SA_OFF_CONTEXT_LENS] + s]; }
  __device__ int query_unit_start(int s) const { return g.step_args[g.sa_header[SA_OFF_QUERY_UNITS] + s]; }
  // The end of sequence s's live tokens: at most its context length. A padded step's last dummy sequence
  // (engine/cuda/step_padding.py) carries the padding's tokens past its one-token context; attention, the tiles and
  // the LM head skip them (engine/instructions/step_args.py StepArgsView.live_end).
  __device__ int live_end(int s) const {
    const int first = query_start(s);
    return first + min(query_start(s + 1) - first, context_len(s));
  }
  __device__ int block(int s, int i) const {
    return g.step_args[g.sa_header[SA_OFF_BLOCK_TABLES] + s * max_pages() + i];
  }
};

// (token, element) of a flat index over rows of n elements: (idx / n, idx % n), except in the batch-1 kernel
// variants (B1), whose streams have one token (the host's rule, engine/cuda/variant.py): there the token is 0 and
// no run-time division sits in the epilogues on the layer's critical path.
template <bool B1>
__device__ __forceinline__ int2 token_index(int idx, int n) {
  if constexpr (B1) return make_int2(0, idx);
  return make_int2(idx / n, idx % n);
}

__device__ __forceinline__ bool aborted(const Globals& g) {
  return *reinterpret_cast<volatile const int*>(g.error) != ERR_NONE;
}

// The first failure wins; its record names the stuck instruction for the host's exception.
__device__ __forceinline__ void record_error(const Globals& g, int kind, const int* instr, int counter,
                                             int target, int observed) {
  if (atomicCAS(g.error, ERR_NONE, -1) != ERR_NONE) return;
  g.error[1] = instr ? instr[W_ID] : -1;
  g.error[2] = instr ? instr[W_OPCODE] : -1;
  g.error[3] = counter;
  g.error[4] = target;
  g.error[5] = observed;
  g.error[6] = blockIdx.x;
  g.error[7] = instr ? instr[W_LAYER] : -1;
  __threadfence();
  atomicExch(g.error, kind);
}

// The batch-1 kernel (template flag B1: one sequence, one new token, attention through the ring) compiles only
// those paths; an instruction that needs another is a host error (it picked the variant: engine/cuda/variant.py).
// Thread 0 records it; every caller returns false, so the step fails with this record.
__device__ __forceinline__ bool variant_mismatch(const Globals& g, const int* instr) {
  if (threadIdx.x == 0) record_error(g, ERR_VARIANT, instr, -1, 0, 0);
  return false;
}

// An instruction whose step has more tokens than one matvec takes keeps its weight pages in the ring while it runs
// its token groups (token_groups.cuh): more pages than the ring holds would wait forever for the loader, so the
// host cuts such instructions small enough (engine/cuda/limits.py fit_stream) and this records its mistake.
__device__ __forceinline__ bool ring_hold_error(const Globals& g, const int* instr, int n_pages, int ring_pages) {
  if (threadIdx.x == 0) record_error(g, ERR_RING_HOLD, instr, -1, ring_pages, n_pages);
  return false;
}

// Spin until counters[c] >= epoch * period[c] + target (acquire). False on watchdog/abort.
__device__ __forceinline__ bool wait_dependency(const Globals& g, const int* instr, int c, int target) {
  const int goal = g.epoch * g.counter_period[c] + target;
  const int* p = g.counters + c;
  if (tk::load_acquire(p) >= goal) return true;
  // Spin without sleeping: the wait sits on the critical path, and each poll is already a loaded L2
  // round trip (a back-off sleep added up to 256 ns per poll). The abort flag and the clock are read
  // every 16 polls only. Measured on an H200: 0.966 -> 0.956 ms per 1B decode step.
  const uint64_t start = tk::globaltimer();
  for (int n = 1;; ++n) {
    const int v = tk::load_acquire(p);
    if (v >= goal) return true;
    if ((n & 15) == 0) {
      if (aborted(g)) return false;
      if (tk::globaltimer() - start > static_cast<uint64_t>(g.timeout_ns)) {
        record_error(g, ERR_COUNTER_TIMEOUT, instr, c, goal, v);
        return false;
      }
    }
  }
}

// Which intra-SM wait a stuck role sat in (error words 8..12 record the first one seen stuck when
// the kernel aborts: where, on which block, at which pipeline position, for which instruction).
enum WaitSite : int {
  SITE_CONTROLLER_SLOT_FREE = 1,
  SITE_LOADER_SLOT_FULL = 2,
  SITE_LOADER_PAGE_EMPTY = 3,
  SITE_CONSUMER_SLOT_FULL = 4,
  SITE_CONSUMER_PAGE_FULL = 5,
  SITE_CONSUMER_PAGE_ISSUED = 6,
  SITE_LOADER_INFLIGHT_CAP = 7,  // the loader waiting for an older copy to land (Globals::max_inflight_pages)
};

__device__ __forceinline__ void record_stall(const Globals& g, int site, uint32_t position, uint32_t parity,
                                             const int* instr, const tk::semaphore& sem) {
  if (atomicCAS(g.error + 8, 0, site) != 0) return;
  g.error[9] = blockIdx.x;
  g.error[10] = (int)position;
  g.error[11] = (int)parity;
  g.error[12] = instr ? instr[W_ID] : -1;
  // The raw mbarrier word (phase, pending arrivals, pending transaction bytes) tells a lost copy from
  // a missing arrival in the post-mortem.
  const uint64_t raw = *reinterpret_cast<const volatile uint64_t*>(&sem.word);
  g.error[13] = (int)(raw & 0xffffffffu);
  g.error[14] = (int)(raw >> 32);
}

// Bounded mbarrier wait for the intra-SM pipeline; gives up when another block aborted. Its limit is
// a multiple of the dependency watchdog's, so a stuck counter is reported as such: the loader can
// legitimately sit on a full ring for as long as the consumers wait on a dependency.
inline constexpr int PIPELINE_TIMEOUT_FACTOR = 4;

__device__ __forceinline__ bool wait_pipeline(const Globals& g, tk::semaphore& sem, uint32_t parity,
                                              const int* instr, int site, uint32_t position) {
  if (tk::try_wait(sem, parity)) return true;
  const uint64_t start = tk::globaltimer();
  for (int n = 0;; ++n) {
    if (tk::try_wait(sem, parity)) return true;
    if ((n & 15) == 15) {
      if (aborted(g)) {
        if (tk::lane_id() == 0 && tk::globaltimer() - start > 1000000ull) record_stall(g, site, position, parity, instr, sem);
        return false;
      }
      if (tk::globaltimer() - start > static_cast<uint64_t>(g.timeout_ns) * PIPELINE_TIMEOUT_FACTOR) {
        record_error(g, ERR_PIPELINE_TIMEOUT, instr, -1, 0, 0);
        record_stall(g, site, position, parity, instr, sem);
        return false;
      }
    }
  }
}

// A parity wait only tells "the phase of this parity completed" apart from "the one before it".
// Consumer warps take the pages of an instruction round-robin and drift apart, so a fast warp can
// reach ring position n while position n - R has not even been issued (R = ring pages; a slow warp still
// holds n - 2R): its parity wait on n would then pass at once, on the wrong page, and the extra
// page_empty arrival would desynchronise the ring for good (it stalled the LM head, whose ops take many pages).
// Waiting first until the loader has armed position n makes the parity wait unambiguous.
__device__ __forceinline__ bool wait_page_issued(const Globals& g, const Shared& sm, uint32_t position,
                                                 const int* instr) {
  if (tk::load_acquire_shared(sm.ring_issued) > position) return true;
  const uint64_t start = tk::globaltimer();
  for (int n = 0;; ++n) {
    if (tk::load_acquire_shared(sm.ring_issued) > position) return true;
    if ((n & 15) == 15) {
      if (aborted(g)) return false;
      if (tk::globaltimer() - start > static_cast<uint64_t>(g.timeout_ns) * PIPELINE_TIMEOUT_FACTOR) {
        record_error(g, ERR_PIPELINE_TIMEOUT, instr, -1, 0, 0);
        if (atomicCAS(g.error + 8, 0, SITE_CONSUMER_PAGE_ISSUED) == 0) {
          g.error[9] = blockIdx.x;
          g.error[10] = (int)position;
          g.error[12] = instr ? instr[W_ID] : -1;
        }
        return false;
      }
    }
  }
}

// Barrier over the consumer warps that also ANDs a per-thread flag: a failure seen by one warp (a
// timed-out page wait) makes every consumer thread leave together instead of deadlocking the rest
// on the next barrier.
__device__ __forceinline__ bool consumer_all(bool ok) {
  __syncwarp();  // reconverge first: a warp must never reach the barrier with some lanes missing
  int out;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n"
      " barrier.red.and.pred q, %2, %3, p;\n selp.s32 %0, 1, 0, q;\n}"
      : "=r"(out)
      : "r"((int)ok), "r"(CONSUMER_BARRIER), "r"(CONSUMER_THREADS)
      : "memory");
  return out != 0;
}

// Thread 0 alone spins on counters right before several of these barriers, and lanes leave
// per-lane mbarrier polls at different times: reconverge with __syncwarp, and use the non-.aligned
// barrier forms, which count threads rather than assuming converged warps.
__device__ __forceinline__ void consumer_sync() {
  __syncwarp();
  asm volatile("barrier.sync %0, %1;" ::"r"(CONSUMER_BARRIER), "r"(CONSUMER_THREADS) : "memory");
}

// Consumer thread 0: from which instruction on the loader keeps its copies in flight to the low cap
// (Globals::chain_inflight_pages): during the latency-bound ops, for the pages of the instructions
// Globals::chain_cap_ahead or more past the one running (the MLP's next pages; an op's own pages, which it
// waits for, as at the step's start where the ring is empty, go at the streaming cap), and, with
// Globals::low_cap_inputs, for every page while an op reads its input.
inline constexpr uint32_t NO_LOW_CAP = 0xffffffffu;
__device__ __forceinline__ void set_low_cap_from(const Shared& sm, uint32_t first_instruction) {
  *reinterpret_cast<volatile uint32_t*>(sm.ring_cursor + 3) = first_instruction;
}
// The loader's side, for instruction i of its queue: re-read before every copy it starts.
__device__ __forceinline__ bool low_cap(const Shared& sm, int i) {
  return (uint32_t)i >= *reinterpret_cast<volatile const uint32_t*>(sm.ring_cursor + 3);
}

// A consumer warp's walk over the ring pages of one instruction, p = warp, warp + 8, ... (consume_pages,
// attend_ring): the ring slot and round of each page advance without a division (the ring size is a run-time
// value; R > NUM_CONSUMER_WARPS, so a step wraps at most once). Starts from the consumers' cursor, which
// finish() moves past the instruction's pages (thread 0, after a barrier every consumer passed once it had
// read the cursor; the next reads follow later barriers).
struct RingWalk {
  uint32_t R, pos0, ring0, round0;  // ring size; the cursor at the instruction's start
  uint32_t ring, round;             // this warp's current page

  __device__ __forceinline__ RingWalk(const Shared& sm, int warp)
      : R(sm.ring_pages), pos0(sm.ring_cursor[0]), ring0(sm.ring_cursor[1]), round0(sm.ring_cursor[2]),
        ring(ring0 + warp), round(round0) {
    wrap();
  }
  __device__ __forceinline__ void next() {  // to page p + NUM_CONSUMER_WARPS
    ring += NUM_CONSUMER_WARPS;
    wrap();
  }
  // The ring slot and round of the instruction's page p (p < R: a short stream, every page held at once).
  __device__ __forceinline__ void page(uint32_t p, uint32_t& at, uint32_t& at_round) const {
    at = ring0 + p;
    at_round = round0;
    if (at >= R) {
      at -= R;
      ++at_round;
    }
  }
  __device__ __forceinline__ void finish(const Shared& sm, int n_pages) const {
    uint32_t next_ring = ring0 + n_pages, next_round = round0;
    while (next_ring >= R) {  // n_pages / R steps: one or none except for the LM head's large blocks
      next_ring -= R;
      ++next_round;
    }
    sm.ring_cursor[0] = pos0 + n_pages;
    sm.ring_cursor[1] = next_ring;
    sm.ring_cursor[2] = next_round;
  }

 private:
  __device__ __forceinline__ void wrap() {
    if (ring >= R) {
      ring -= R;
      ++round;
    }
  }
};
static_assert(MIN_RING_PAGES > NUM_CONSUMER_WARPS, "a warp's step must wrap the ring at most once");

// Loads of data other SMs wrote in this launch: bypass L1 so no stale line is ever read.
__device__ __forceinline__ float load_cg(const float* p) { return __ldcg(p); }

}  // namespace mk::vm
