// weight_stream.cuh: which weight rows an instruction streams through the page ring. Each opcode describes
// its own (Op<OP>::weights, ops/<name>.cuh); the controller derives the description once per instruction
// (ops/dispatch.cuh weight_stream) into the slot, where the loader and the consumers both read it, so they
// agree on how many pages an instruction takes and which rows each page holds without talking.
#pragma once

#include "config.cuh"
#include "globals.cuh"
#include "opcodes.cuh"

namespace mk::vm {

struct WeightStream {
  const bf16* base = nullptr;  // first element of row 0
  int rows = 0;                // rows streamed (0 = the opcode reads no weight matrix)
  int row_elems = 0;           // contiguous bf16 elements per row (the matvec's K)
  long long row_stride = 0;    // elements between consecutive rows in global memory
  __device__ int rows_per_page() const { return PAGE_BYTES / (row_elems * 2); }
  __device__ int num_pages() const {
    if (rows == 0) return 0;
    const int rpp = rows_per_page();
    return (rows + rpp - 1) / rpp;
  }
};

// What an opcode's weight stream is cut from (Op<OP>::weights): the instruction's layer and operands and the
// model's widths, read once, ahead of the opcode switch (ops/dispatch.cuh weight_stream).
struct StreamInputs {
  int layer;
  const int* a;       // the operands (the words from W_OPERANDS on)
  long long H, I, Q;  // hidden size, intermediate size, attention width (n_heads x head_dim)
};

// The controller's copy of an instruction's stream in its slot (opcodes.cuh, W_SLOT_*).
__device__ __forceinline__ void store_slot_stream(int* slot, const WeightStream& s) {
  slot[W_SLOT_NUM_PAGES] = s.num_pages();
  slot[W_SLOT_ROWS_PER_PAGE] = s.rows ? s.rows_per_page() : 0;
  *reinterpret_cast<const bf16**>(slot + W_SLOT_STREAM) = s.base;
  slot[W_SLOT_STREAM + 2] = s.rows;
  slot[W_SLOT_STREAM + 3] = s.row_elems;
  *reinterpret_cast<long long*>(slot + W_SLOT_STREAM + 4) = s.row_stride;
}

__device__ __forceinline__ WeightStream slot_stream(const int* slot) {
  WeightStream s;
  s.base = *reinterpret_cast<const bf16* const*>(slot + W_SLOT_STREAM);
  s.rows = slot[W_SLOT_STREAM + 2];
  s.row_elems = slot[W_SLOT_STREAM + 3];
  s.row_stride = *reinterpret_cast<const long long*>(slot + W_SLOT_STREAM + 4);
  return s;
}
static_assert(W_SLOT_NUM_PAGES >= WORDS && W_SLOT_STREAM % 2 == 0 && W_SLOT_STREAM + 6 <= SLOT_WORDS &&
              (SLOT_WORDS * 4) % 8 == 0, "slot-only words: past the record, 8-byte aligned pointers");

}  // namespace mk::vm
