// config.cuh: the interpreter's fixed resources (block shape, shared-memory plan). Model dims are
// runtime values in Globals; these only bound per-instruction sizes, which the host validates.
#pragma once

#include <cstdint>

namespace mk::vm {

inline constexpr int NUM_CONSUMER_WARPS = 8;
inline constexpr int CONSUMER_THREADS = NUM_CONSUMER_WARPS * 32;
inline constexpr int CONTROLLER_WARP = NUM_CONSUMER_WARPS;      // fetches instructions ahead
inline constexpr int LOADER_WARP = NUM_CONSUMER_WARPS + 1;      // streams weights with TMA
inline constexpr int BLOCK_THREADS = (NUM_CONSUMER_WARPS + 2) * 32;

inline constexpr int PAGE_BYTES = 16384;  // one weight page; a weight row must fit in one page
inline constexpr int NUM_PAGES = 9;       // the weight ring, shared by consecutive instructions
inline constexpr int NUM_SLOTS = 4;       // instructions fetched ahead
inline constexpr int X_FLOATS = 16384;    // activations of the current instruction (fp32)
inline constexpr int OUT_FLOATS = 4096;   // matvec results of the current instruction (fp32)
inline constexpr int SCRATCH_FLOATS = 128;
inline constexpr int MAX_TOKENS_PER_MATVEC = 8;  // rows of x one matvec handles at once
inline constexpr int MAX_GQA = 8;

inline constexpr int CONSUMER_BARRIER = 1;  // named barrier id for the consumer warps

struct SharedPlan {
  static constexpr int pages = 0;
  static constexpr int x = pages + NUM_PAGES * PAGE_BYTES;
  static constexpr int out = x + X_FLOATS * 4;
  static constexpr int scratch = out + OUT_FLOATS * 4;
  static constexpr int slots = scratch + SCRATCH_FLOATS * 4;
  static constexpr int ring_issued = slots + NUM_SLOTS * 32 * 4;  // one u32, padded to 16 bytes
  static constexpr int barriers = ring_issued + 16;
  // full/empty per page, full/free per slot
  static constexpr int total = barriers + (2 * NUM_PAGES + 2 * NUM_SLOTS) * 8;
};
static_assert(SharedPlan::total <= 227 * 1024, "shared-memory plan exceeds the 227 KiB per block");
static_assert(SharedPlan::x % 1024 == 0 && SharedPlan::barriers % 8 == 0, "alignment");
static_assert(PAGE_BYTES % 16 == 0, "bulk copies move 16-byte multiples");

}  // namespace mk::vm
