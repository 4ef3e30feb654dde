// config.cuh: the interpreter's fixed resources (block shape, shared-memory plan). Model dims are
// runtime values in Globals; these only bound per-instruction sizes, which the host validates.
#pragma once

#include <cstdint>

#include "opcodes.cuh"

namespace mk::vm {

inline constexpr int NUM_CONSUMER_WARPS = 8;
inline constexpr int CONSUMER_THREADS = NUM_CONSUMER_WARPS * 32;
inline constexpr int CONTROLLER_WARP = NUM_CONSUMER_WARPS;      // fetches instructions ahead
inline constexpr int LOADER_WARP = NUM_CONSUMER_WARPS + 1;      // streams weights with TMA
// The controller and loader warps sit in a third warpgroup with two idle warps, so each warpgroup can move registers
// as a whole (tk/registers.cuh): with 10 warps a block got 168 registers per thread (three warps of an SM sub-partition
// share its 64 KB) and the consumers' code spilled (104/760 bytes in the general kernel); the producers give theirs
// down to PRODUCER_REGISTERS and the consumers take CONSUMER_REGISTERS.
inline constexpr int BLOCK_THREADS = (NUM_CONSUMER_WARPS + 4) * 32;
inline constexpr int LAUNCH_REGISTERS = 65536 / BLOCK_THREADS / 8 * 8;  // what __launch_bounds__ leaves: 168
inline constexpr int PRODUCER_REGISTERS = 56;
inline constexpr int CONSUMER_REGISTERS = 224;
static_assert(NUM_CONSUMER_WARPS == 8 && BLOCK_THREADS == 3 * 128, "two consumer warpgroups and a producer one");
static_assert(2 * 128 * (CONSUMER_REGISTERS - LAUNCH_REGISTERS) <= 128 * (LAUNCH_REGISTERS - PRODUCER_REGISTERS),
              "the consumers take no more registers than the producers give");

inline constexpr int PAGE_BYTES = 16384;  // one weight page; a weight row must fit in one page
inline constexpr int NUM_SLOTS = 4;       // instructions fetched ahead
// The weight ring (shared by consecutive instructions) and the activations of the current instruction
// (fp32 x) share one pool: the ring takes Globals::ring_pages pages from its front, x the rest. With
// MIN_RING_PAGES x has X_FLOATS (9 tokens of a 2048-wide model); a stream whose inputs are narrower
// (batch-1 decode needs a few thousand floats) gives the difference to the ring: more weight bytes
// buffered while the latency-bound ops run (one page more or less moved 1B batch-1 decode by ≈ 2 %).
// The host picks ring_pages per stream (engine/cuda/limits.py).
inline constexpr int MIN_RING_PAGES = 9;
inline constexpr int MAX_RING_PAGES = 13;
inline constexpr int X_FLOATS = 18432;    // x at MIN_RING_PAGES
inline constexpr int POOL_BYTES = MIN_RING_PAGES * PAGE_BYTES + X_FLOATS * 4;
// Matvec results of the current instruction (fp32): the widest output of a step's instruction, usually the
// LM head's vocab block (128256 / 132 SMs = 976 rows per sequence; the host cuts more blocks for 3+ sequences).
inline constexpr int OUT_FLOATS = 2048;
inline constexpr int SCRATCH_FLOATS = 256;
inline constexpr int MAX_TOKENS_PER_MATVEC = 8;  // rows of x one CUDA-core matvec handles at once (a token group)
// ... and one tensor-core matvec (bf16 x: dot_tokens_mma.cuh), where x holds them. A step's token group is the host's
// choice (Globals::token_group, engine/cuda/limits.py token_group): 16 where every matvec input of the model takes
// the tensor cores and 16 rows fit x (a 1B step of 16 sequences is one group, its instructions free to stream as
// many pages as they like), else MAX_TOKENS_PER_MATVEC.
inline constexpr int MAX_TOKEN_GROUP = 16;
// Tokens one step may carry when x holds a whole token group: larger steps run their matvecs group by group over
// pages kept in the ring (token_groups.cuh). Every per-token buffer is sized per stream; this only bounds the
// int arithmetic of token offsets (tokens x the intermediate size).
inline constexpr int MAX_TOKENS_PER_STEP = 16384;
inline constexpr int X_ROW_SKEW = 8;  // extra bf16 elements between x rows on the tensor cores (activations.cuh x_pitch)
inline constexpr int MAX_GQA = 8;
// Ranks of a tensor-parallel group (Globals::tp_world): one GPU each on one host; TP_ALLREDUCE keeps one load per
// rank in flight (ops/tp_allreduce.cuh). engine/instructions/tp_exchange.py MAX_TP_RANKS.
inline constexpr int MAX_TP_RANKS = 8;

inline constexpr int CONSUMER_BARRIER = 1;  // named barrier id for the consumer warps

// Compiled variants of the interpreter (interpreter.cu; the host picks one per stream: engine/cuda/variant.py).
// The batch-1 ones hold only the paths of one sequence's one new token, and only one attention path each; the
// tall-tile one is the general kernel whose TILE_MATMUL also takes tall tiles (tile_wide.cuh), kept apart because their
// 128 accumulators a thread make ptxas spill the whole interpreter's state (the general kernel's spills 40/252 ->
// 244/1192 bytes with them in it).
enum KernelVariant : int {
  VARIANT_GENERAL = 0,
  VARIANT_BATCH1_SPLIT = 1,  // ATTN_PARTIAL (+ ATTN_REDUCE) and O_PROJ_RESIDUAL
  VARIANT_BATCH1_FUSED = 2,  // ATTN_O_PROJ
  VARIANT_TILES_TALL = 3,    // the general kernel's opcodes, TILE_MATMUL with tall tiles
  NUM_VARIANTS = 4,
};

struct SharedPlan {
  static constexpr int pages = 0;  // ring pages, then x (runtime split: x_floats())
  static constexpr int out = pages + POOL_BYTES;
  static constexpr int scratch = out + OUT_FLOATS * 4;
  static constexpr int slots = scratch + SCRATCH_FLOATS * 4;
  // one u32, the consumers' ring cursor (3 u32) and their current opcode (1 u32): state.cuh
  static constexpr int ring_issued = slots + NUM_SLOTS * SLOT_WORDS * 4;
  static constexpr int barriers = ring_issued + 32;
  // full/empty per page, full/free per slot
  static constexpr int total = barriers + (2 * MAX_RING_PAGES + 2 * NUM_SLOTS) * 8;
};
// Floats of x when the ring has `ring_pages` pages (the host never picks a ring that leaves x too small).
__host__ __device__ constexpr int x_floats(int ring_pages) { return (POOL_BYTES - ring_pages * PAGE_BYTES) / 4; }
static_assert(x_floats(MIN_RING_PAGES) == X_FLOATS && x_floats(MAX_RING_PAGES) > 0, "pool split");
static_assert(SharedPlan::total <= 227 * 1024, "shared-memory plan exceeds the 227 KiB per block");
static_assert(PAGE_BYTES % 1024 == 0 && SharedPlan::barriers % 8 == 0, "alignment");
static_assert(PAGE_BYTES % 16 == 0, "bulk copies move 16-byte multiples");

}  // namespace mk::vm
