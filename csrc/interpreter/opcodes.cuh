// opcodes.cuh: the instruction record layout of docs/INSTRUCTIONS.md (format version 3).
// tests/instructions/test_cuda_header_sync.py checks these numbers against engine/instructions.
#pragma once

namespace mk::vm {

inline constexpr int FORMAT_VERSION = 4;
inline constexpr int WORDS = 32;

// The instruction set, one line per opcode: X(NAME, number, weights), the numbers of
// engine/instructions/registry.py. Each opcode's code is ops/<name in lower case>.cuh. Opcode 0, NOOP, ends a
// static queue and is never dispatched (ops/noop.cuh); every other opcode's header specialises Op<OP_NAME>
// (op_traits.cuh), and ops/dispatch.cuh switches on the opcode by MK_OPCODES, in its order (a layer's), which
// fixes the order of the cases' code in the kernel. `weights`: STREAMED where the opcode streams weight rows
// through the page ring (its Op<OP>::weights), else NONE; the weight-stream switch has cases for the STREAMED
// ones only (a case for every opcode, even an empty one, changed the controller's code).
#define MK_OPCODE_NOOP(X) X(NOOP, 0, NONE)
#define MK_OPCODES(X)                 \
  X(EMBED, 1, NONE)                   \
  X(RMS_QKV_ROPE_APPEND, 2, STREAMED) \
  X(ATTN_PARTIAL, 3, NONE)            \
  X(ATTN_REDUCE, 4, NONE)             \
  X(O_PROJ_RESIDUAL, 5, STREAMED)     \
  X(ATTN_O_PROJ, 10, STREAMED)        \
  X(RMS_GATE_UP_SILU, 6, STREAMED)    \
  X(DOWN_RESIDUAL, 7, STREAMED)       \
  X(LM_HEAD, 8, STREAMED)             \
  X(ARGMAX_REDUCE, 9, NONE)           \
  X(TILE_MATMUL, 11, STREAMED)        \
  X(TP_ALLREDUCE, 12, NONE)           \
  X(TP_ARGMAX, 13, NONE)

#define MK_OPCODE_CONSTANT(NAME, CODE, WEIGHTS) inline constexpr int OP_##NAME = CODE;
MK_OPCODE_NOOP(MK_OPCODE_CONSTANT)
MK_OPCODES(MK_OPCODE_CONSTANT)
#undef MK_OPCODE_CONSTANT
static_assert(OP_NOOP == 0, "a static queue ends at its first opcode 0");

// One more than the highest opcode. Kernel knobs take per-opcode bit masks in one int (e.g.
// Globals::l2_beyond_ring_ops), so opcodes stay below 32.
__host__ __device__ constexpr int num_opcodes() {
  int n = 0;
#define MK_OPCODE_MAX(NAME, CODE, WEIGHTS) n = (CODE) > n ? (CODE) : n;
  MK_OPCODES(MK_OPCODE_MAX)
#undef MK_OPCODE_MAX
  return n + 1;
}
inline constexpr int NUM_OPCODES = num_opcodes();
static_assert(NUM_OPCODES <= 32, "per-opcode bit masks are one int");

// Word indices.
inline constexpr int W_OPCODE = 0;
inline constexpr int W_ID = 1;
inline constexpr int W_LAYER = 2;
inline constexpr int W_OPERANDS = 3;  // operand k is word 3 + k
inline constexpr int W_NUM_WAITS = 16;
inline constexpr int W_WAITS = 17;  // pair k = (17 + 2k, 18 + 2k)
inline constexpr int MAX_WAITS = 5;
inline constexpr int W_SIGNAL_COUNTER = 27;
inline constexpr int W_SIGNAL_AMOUNT = 28;
// Slot-only words past the record (a shared-memory slot holds SLOT_WORDS): the instruction's weight
// stream, derived by the controller when it fetches the instruction, so that neither the loader nor the
// consumers (on the critical path between an op's input and its page loop) branch through the opcode
// switch and divide. Layout: page count, rows per page, base (2 words), rows, row elements, stride (2 words),
// and at W_SLOT_SCALE the fp8 rows' scales (2 words; weight_stream.cuh).
inline constexpr int SLOT_WORDS = 50;
inline constexpr int W_SLOT_NUM_PAGES = 32;
inline constexpr int W_SLOT_ROWS_PER_PAGE = 33;
inline constexpr int W_SLOT_STREAM = 34;
// ATTN_PARTIAL and ATTN_O_PROJ of one new token (decode) stream the keys and values written by earlier
// steps through the same ring (kv_stream.cuh): the stream's first W_SLOT_KV_RING_PAGES ring pages hold KV
// pages, any weight pages (ATTN_O_PROJ's W_o slice) follow, and W_SLOT_NUM_PAGES counts them all. These
// words say the rest (all derived by the controller from the step args):
inline constexpr int W_SLOT_KV_MODE = 40;     // KV pages per ring page (>= 1): the KV-ring path; 0: keys from global
inline constexpr int W_SLOT_KV_PAGE_LO = 41;  // first KV page (index into the sequence's block table)
inline constexpr int W_SLOT_KV_PAGES = 42;    // KV pages in the stream
inline constexpr int W_SLOT_KV_RING_END = 43; // keys [page_lo * page_size, ring_end) come from the ring
inline constexpr int W_SLOT_KV_NEW_KEY = 44;  // the new token's key index (its position), -1: not in this split
inline constexpr int W_SLOT_KV_NEW_SLOT = 45; // the new token's KV-cache slot (page * page_size + offset)
inline constexpr int W_SLOT_KV_TOKEN = 46;    // the new token's index in the step (its query row)
inline constexpr int W_SLOT_KV_RING_PAGES = 47;  // ring pages of KV at the stream's start (0 without the KV ring)
inline constexpr int W_SLOT_SCALE = 48;          // the stream's fp8 scales (2 words), after the KV words

// Step-args header words.
inline constexpr int SA_NUM_TOKENS = 1;
inline constexpr int SA_NUM_SEQS = 2;
inline constexpr int SA_MAX_PAGES = 3;
inline constexpr int SA_PAGE_SIZE = 4;
inline constexpr int SA_OFF_TOKEN_IDS = 5;
inline constexpr int SA_OFF_POSITIONS = 6;
inline constexpr int SA_OFF_SLOTS = 7;
inline constexpr int SA_OFF_QUERY_START = 8;
inline constexpr int SA_OFF_CONTEXT_LENS = 9;
inline constexpr int SA_OFF_BLOCK_TABLES = 10;
inline constexpr int SA_OFF_QUERY_UNITS = 12;  // where each sequence's query units start (query_units.cuh)
inline constexpr int SA_HEADER_WORDS = 16;  // engine/instructions/layout.py STEP_ARGS_HEADER_WORDS

// Error record written by the first failing block (error[0] != 0 also tells every block to stop).
inline constexpr int ERR_NONE = 0;
inline constexpr int ERR_COUNTER_TIMEOUT = 1;  // a dependency wait never got satisfied (watchdog)
inline constexpr int ERR_BAD_OPCODE = 2;
inline constexpr int ERR_PIPELINE_TIMEOUT = 3;  // an intra-SM mbarrier wait timed out
inline constexpr int ERR_QUEUE_EPOCH = 4;  // a dynamic claim fell before this launch's queue (bad epoch)
inline constexpr int ERR_VARIANT = 5;  // an instruction outside its kernel variant's paths (state.cuh)
inline constexpr int ERR_RING_HOLD = 6;  // a token-grouped instruction streams more pages than the ring holds
// TP_ALLREDUCE (ops/tp_allreduce.cuh): a peer rank never published its chunk (watchdog; counter = the rank, target =
// the count awaited, observed = its count), or, with counter -1, a step of more tokens (observed) than the exchange's
// send slots hold (target); TP_ARGMAX's too (ops/tp_argmax.cuh: counter = the rank, target = its tag, observed = the
// word's)
inline constexpr int ERR_TP_PEER_TIMEOUT = 7;
inline constexpr int ERR_WORDS = 16;  // kind, instr id, opcode, counter, target, observed, block, layer

// Progress record per block: consumer instr id, consumer stage, consumer ring position, loader ring
// position, loader instr id. Plain stores, read by the host only after a failed step.
inline constexpr int PROGRESS_WORDS = 8;
inline constexpr int STAGE_WAITING = 1, STAGE_RUNNING = 2, STAGE_SIGNALLED = 3;

// Timing record per instruction (int64): start, dependencies satisfied, end, SM id, then the
// sub-phase marks of marks.cuh (0 = not reached). Only written when Globals::timing is set.
inline constexpr int TIMING_WORDS = 12;
inline constexpr int TIMING_MARK0 = 4;  // first sub-phase mark word

}  // namespace mk::vm
