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
  const uint8_t* base = nullptr;  // first byte of row 0
  int rows = 0;                   // rows streamed (0 = the opcode reads no weight matrix)
  int row_elems = 0;              // contiguous elements per row (the matvec's K)
  long long row_stride = 0;       // elements between consecutive rows in global memory
  // fp8 (e4m3) rows: row r of the stream stands for its bytes times scale[r] (one scale per output channel);
  // nullptr: bf16 rows. One byte per element halves a row, so a page holds twice the rows.
  const float* scale = nullptr;
  __host__ __device__ int elem_bytes() const { return scale ? 1 : 2; }
  __host__ __device__ int row_bytes() const { return row_elems * elem_bytes(); }
  __device__ const uint8_t* row(long long r) const { return base + r * row_stride * elem_bytes(); }
  __device__ int rows_per_page() const { return PAGE_BYTES / row_bytes(); }
  __device__ int num_pages() const {
    if (rows == 0) return 0;
    const int rpp = rows_per_page();
    return (rows + rpp - 1) / rpp;
  }
};

// Rows [first_row, first_row + rows) of matrix m (rows of row_stride elements: bf16, or fp8 bytes where the
// matrix has per-row scales), their columns [col0, col0 + row_elems): how every weight-streaming opcode
// describes its stream (Op<OP>::weights), so none of them computes byte offsets of its own.
__device__ __forceinline__ WeightStream matrix_rows(const void* m, const float* scale, long long first_row, int rows,
                                                    long long col0, int row_elems, long long row_stride) {
  WeightStream s;
  s.scale = scale ? scale + first_row : nullptr;
  s.base = static_cast<const uint8_t*>(m) + (first_row * row_stride + col0) * s.elem_bytes();
  s.rows = rows;
  s.row_elems = row_elems;
  s.row_stride = row_stride;
  return s;
}

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
  *reinterpret_cast<const uint8_t**>(slot + W_SLOT_STREAM) = s.base;
  slot[W_SLOT_STREAM + 2] = s.rows;
  slot[W_SLOT_STREAM + 3] = s.row_elems;
  *reinterpret_cast<long long*>(slot + W_SLOT_STREAM + 4) = s.row_stride;
  *reinterpret_cast<const float**>(slot + W_SLOT_SCALE) = s.scale;
}

// The stream's fp8 scales from its slot (nullptr: bf16 rows).
__device__ __forceinline__ const float* slot_scales(const int* slot) {
  return *reinterpret_cast<const float* const*>(slot + W_SLOT_SCALE);
}

__device__ __forceinline__ WeightStream slot_stream(const int* slot) {
  WeightStream s;
  s.base = *reinterpret_cast<const uint8_t* const*>(slot + W_SLOT_STREAM);
  s.rows = slot[W_SLOT_STREAM + 2];
  s.row_elems = slot[W_SLOT_STREAM + 3];
  s.row_stride = *reinterpret_cast<const long long*>(slot + W_SLOT_STREAM + 4);
  s.scale = slot_scales(slot);
  return s;
}
static_assert(W_SLOT_NUM_PAGES >= WORDS && W_SLOT_STREAM % 2 == 0 && W_SLOT_STREAM + 6 <= SLOT_WORDS &&
              W_SLOT_SCALE % 2 == 0 && W_SLOT_SCALE + 2 <= SLOT_WORDS &&
              (SLOT_WORDS * 4) % 8 == 0, "slot-only words: past the record, 8-byte aligned pointers");

}  // namespace mk::vm
