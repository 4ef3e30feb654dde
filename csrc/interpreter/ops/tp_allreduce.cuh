// ops/tp_allreduce.cuh: TP_ALLREDUCE (engine/instructions/ops/tp_allreduce.py), one column chunk of the residual
// averaged over the ranks of a tensor-parallel group, inside the step. Each rank (one megakernel per GPU) holds
// its partial of hidden after its O or down projection; the ranks exchange the chunk through per-rank send slots
// and publish counts that every rank has mapped (peer memory over NVLink: Globals::tp_send, Globals::tp_flags).
#pragma once

#include "../code_size.cuh"

#include "../op_traits.cuh"
#include "../state.cuh"

namespace mk::vm {

// The exchange's accesses, at system scope: the peers are other GPUs, so GPU-scope ordering does not reach them.
// A peer's send slot is read with a relaxed system-scope load, which is never served from a stale L1 line (the
// slots are rewritten every other all-reduce, and an earlier one may have brought the lines into this SM's L1).
__device__ __forceinline__ float4 tp_load_send(const float* p) {
  float4 v;
  asm volatile("ld.relaxed.sys.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ int tp_load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void tp_store_relaxed(int* p, int v) {
  asm volatile("st.relaxed.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// One release fence for the N count stores that follow it (a st.release per rank would fence N times). Cumulative:
// the consumer barrier before it orders every consumer thread's send-slot writes before it.
__device__ __forceinline__ void tp_fence_release() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Rank q's buffer as mapped in this process (Globals::tp_send / tp_flags: fixed for the launch, read-only path).
template <typename T>
__device__ __forceinline__ T* tp_mapped(T* const* table, int q) {
  return reinterpret_cast<T*>(__ldg(reinterpret_cast<const unsigned long long*>(table + q)));
}

// Thread 0's error record, out of line: record_error inlines to a few dozen instructions and both of the op's
// failures are rare, so the op's code in the consumers' switch keeps a call instead.
__device__ __noinline__ void tp_error(const Globals& g, const int* w, int counter, int target, int observed) {
  record_error(g, ERR_TP_PEER_TIMEOUT, w, counter, target, observed);
}

// Thread 0: spin until rank q's publish count in this rank's flags (`flag`) reaches v, bounded like
// wait_dependency (state.cuh): polls back to back, the abort flag and the clock every 16 polls. Out of line: the op
// polls once inline and calls this only for a peer that has not published yet.
__device__ __noinline__ bool tp_wait_peer(const Globals& g, const int* w, const int* flag, int q, int v) {
  const uint64_t start = tk::globaltimer();
  for (int n = 1;; ++n) {
    const int seen = tp_load_acquire(flag);
    if (seen >= v) return true;
    if ((n & 15) == 0) {
      if (aborted(g)) return false;
      if (tk::globaltimer() - start > static_cast<uint64_t>(g.timeout_ns)) {
        tp_error(g, w, q, v, seen);
        return false;
      }
    }
  }
}

// The push path's 8-byte words: a value in the low half, the tag of the all-reduce that wrote it in the high half,
// written and read whole (a 64-bit access is single-copy atomic), at system scope, never through L1.
__device__ __forceinline__ unsigned long long tp_load_word(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void tp_store_word(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Spin until the word at p carries `tag` (rank q wrote it) and return it; bounded like tp_wait_peer: on the
// watchdog or an abort, a word whose tag is not `tag` (the caller fails). A word, not a pointer to the caller's
// value: an address taken would put the caller's values in local memory.
__device__ __noinline__ unsigned long long tp_wait_word(const Globals& g, const int* w, const unsigned long long* p,
                                                        unsigned tag, int q) {
  const uint64_t start = tk::globaltimer();
  for (int n = 1;; ++n) {
    const unsigned long long word = tp_load_word(p);
    if ((unsigned)(word >> 32) == tag) return word;
    if ((n & 15) == 0) {
      if (aborted(g)) return (unsigned long long)(tag ^ 1u) << 32;
      if (tk::globaltimer() - start > static_cast<uint64_t>(g.timeout_ns)) {
        tp_error(g, w, q, (int)tag, (int)(word >> 32));
        return (unsigned long long)(tag ^ 1u) << 32;
      }
    }
  }
}

// The push path, for steps of at most tp_ll_tokens tokens (decode), where the all-reduce's latency is what counts:
// every thread stores its values of the chunk straight into every rank's receive slot (slot index & 1, this rank's
// rows), each as a word tagged count * 2 layers + index (the chunk's publish count, one per step: a tag no other
// all-reduce writes there), then reads its own slot's words of every rank until each carries the tag, and sums them
// from rank 0 up as the send-slot path does. No fence, no count exchange and no remote load between one rank's chunk
// and another's sum; only this rank's own count is kept (both paths raise it once per step, so they mix freely).
template <bool B1>
__device__ bool tp_allreduce_push(const Globals& g, const int* w, int T) {
  const int N = g.tp_world, r = g.tp_rank, H = g.hidden_size, c0 = w[5], n = w[6] - w[5];
  const long long rows = (long long)g.tp_ll_tokens * H;  // one (slot, source rank)'s words
  const long long slot = (long long)(w[3] & 1) * N * rows;
  int* const own_count = tp_mapped(g.tp_flags, r) + (w[3] * g.tp_flag_chunks + w[4]) * N + r;
  const int v = __ldcg(own_count) + 1;  // every thread reads it before thread 0 raises it (after the barrier below)
  const unsigned tag = (unsigned)v * (unsigned)(2 * g.layers) + (unsigned)w[3];
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * n; idx += CONSUMER_THREADS) {
    const int2 tc = token_index<B1>(idx, n);
    const long long e = (long long)tc.x * H + c0 + tc.y;
    const unsigned long long word = ((unsigned long long)tag << 32) | __float_as_uint(__ldcg(g.hidden + e));
    MK_ROLLED
    for (int q = 0; q < N; ++q) tp_store_word(tp_mapped(g.tp_recv, q) + slot + r * rows + e, word);
  }
  const float inv = __frcp_rn((float)N);
  bool ok = true;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * n && ok; idx += CONSUMER_THREADS) {
    const int2 tc = token_index<B1>(idx, n);
    const long long e = (long long)tc.x * H + c0 + tc.y;
    const unsigned long long* mine = tp_mapped(g.tp_recv, r) + slot + e;
    float in[MAX_TP_RANKS];
#pragma unroll
    for (int q = 0; q < MAX_TP_RANKS; ++q) {
      if (q >= N || !ok) continue;
      unsigned long long word = tp_load_word(mine + q * rows);
      if ((unsigned)(word >> 32) != tag) word = tp_wait_word(g, w, mine + q * rows, tag, q);
      ok = (unsigned)(word >> 32) == tag;
      in[q] = __uint_as_float((unsigned)word);
    }
    if (!ok) break;
    float s = in[0];
#pragma unroll
    for (int q = 1; q < MAX_TP_RANKS; ++q)
      if (q < N) s = __fadd_rn(s, in[q]);
    s = __fmul_rn(s, inv);
    g.hidden[e] = s;
    if (w[7]) g.mid[e] = s;
  }
  if (!consumer_all(ok)) return false;
  if (threadIdx.x == 0) *own_count = v;  // read by this chunk's next all-reduce, in a later launch
  return true;
}

// TP_ALLREDUCE: operands index, chunk, col_begin, col_end, write_mid. For t < T, c in [col_begin, col_end):
// hidden[t][c] (and mid[t][c] if write_mid) = (send_0 + send_1 + ... + send_{N-1})[index & 1][t][c] * (1 / N),
// send_q rank q's send buffer [2][tp_slot_tokens][hidden_size], after every rank copied its hidden there.
//   1. publish: the chunk into this rank's slot; thread 0 then writes count v = this rank's last count + 1 at
//      flag (index * tp_flag_chunks + chunk) * N + r of every rank's flags, r this rank (only r writes those);
//   2. wait: thread 0 until every other rank q's count at ... + q of this rank's flags reaches v;
//   3. reduce: every rank sums the slots from rank 0 up, in fp32, add then multiply, so all ranks hold the same
//      bits (and the reference's, engine/instructions/ops/tp_allreduce.py).
// Two slots suffice: the host's waits order a rank's next write of a slot after every rank read it
// (engine/instructions/tp_exchange.py). A step of more tokens than a slot holds is the host's mistake: recorded as
// ERR_TP_PEER_TIMEOUT with counter -1, target the slot's tokens, observed the step's. A single rank is its own
// average: nothing to do (the host emits no TP_ALLREDUCE without tensor parallelism).
template <bool B1>
__device__ bool op_tp_allreduce(const Globals& g, const int* w) {
  const int N = g.tp_world;
  if (N <= 1) return true;
  const int T = B1 ? 1 : StepArgs(g).num_tokens();
  if (T > g.tp_slot_tokens) {
    if (threadIdx.x == 0) tp_error(g, w, -1, g.tp_slot_tokens, T);
    return false;
  }
  if (T <= g.tp_ll_tokens) return tp_allreduce_push<B1>(g, w, T);
  const int r = g.tp_rank, H = g.hidden_size, c0 = w[5], n4 = (w[6] - w[5]) / 4;
  const bool to_mid = w[7] != 0;
  const long long slot = (long long)(w[3] & 1) * g.tp_slot_tokens * H;
  const int f = (w[3] * g.tp_flag_chunks + w[4]) * N;  // this chunk's counts: f + src
  // Thread 0's count read starts before the copy, off the critical path; only this rank writes it, and the last
  // write was in an earlier step (each chunk is published once per step), so a plain load sees it.
  int own = 0;
  if (threadIdx.x == 0) own = __ldcg(tp_mapped(g.tp_flags, r) + f + r);
  float* const send = tp_mapped(g.tp_send, r) + slot;
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * n4; idx += CONSUMER_THREADS) {
    const int2 tc = token_index<B1>(idx, n4);
    const long long e = (long long)tc.x * H + c0 + 4 * tc.y;
    *reinterpret_cast<float4*>(send + e) = __ldcg(reinterpret_cast<const float4*>(g.hidden + e));
  }
  consumer_sync();
  bool ok = true;
  if (threadIdx.x == 0) {
    const int v = own + 1;
    tp_fence_release();
    MK_ROLLED
    for (int q = 0; q < N; ++q) tp_store_relaxed(tp_mapped(g.tp_flags, q) + f + r, v);
    const int* counts = tp_mapped(g.tp_flags, r) + f;
    MK_ROLLED
    for (int q = 0; q < N && ok; ++q)
      if (q != r && tp_load_acquire(counts + q) < v) ok = tp_wait_peer(g, w, counts + q, q, v);
  }
  // The barrier orders thread 0's acquires before every thread's loads of the peers' slots.
  if (!consumer_all(ok)) return false;
  const float inv = __frcp_rn((float)N);  // the reference's fp32 1 / N
  MK_ROLLED
  for (int idx = threadIdx.x; idx < T * n4; idx += CONSUMER_THREADS) {
    const int2 tc = token_index<B1>(idx, n4);
    const long long e = (long long)tc.x * H + c0 + 4 * tc.y;
    // Every rank's load in flight at once, then the sum in rank order.
    float4 in[MAX_TP_RANKS];
#pragma unroll
    for (int q = 0; q < MAX_TP_RANKS; ++q)
      if (q < N) in[q] = tp_load_send(tp_mapped(g.tp_send, q) + slot + e);
    float4 s = in[0];
#pragma unroll
    for (int q = 1; q < MAX_TP_RANKS; ++q)
      if (q < N) s = make_float4(__fadd_rn(s.x, in[q].x), __fadd_rn(s.y, in[q].y), __fadd_rn(s.z, in[q].z),
                                 __fadd_rn(s.w, in[q].w));
    s = make_float4(__fmul_rn(s.x, inv), __fmul_rn(s.y, inv), __fmul_rn(s.z, inv), __fmul_rn(s.w, inv));
    *reinterpret_cast<float4*>(g.hidden + e) = s;
    if (to_mid) *reinterpret_cast<float4*>(g.mid + e) = s;
  }
  return true;
}

template <>
struct Op<OP_TP_ALLREDUCE> : OpTraits {
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared&, const int* w) {
    return op_tp_allreduce<B1>(g, w);
  }
};

}  // namespace mk::vm
