// weight_stream.cuh: which weight rows an instruction streams through the page ring. The loader
// and the consumers both derive the same description from the instruction words, so they agree on
// how many pages an instruction takes and which rows each page holds without talking.
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

__device__ __forceinline__ WeightStream weight_stream(const Globals& g, const int* w) {
  WeightStream s;
  const int op = w[W_OPCODE], layer = w[W_LAYER];
  const int* a = w + W_OPERANDS;
  const long long H = g.hidden_size, I = g.intermediate, Q = (long long)g.n_heads * g.head_dim;
  switch (op) {
    case OP_RMS_QKV_ROPE_APPEND: {
      const long long qkv_rows = (long long)g.n_kv * (g.n_heads / g.n_kv + 2) * g.head_dim;
      s.base = g.w_qkv + (layer * qkv_rows + a[0]) * H;
      s.rows = a[1] - a[0];
      s.row_elems = (int)H;
      s.row_stride = H;
      break;
    }
    case OP_O_PROJ_RESIDUAL:
      s.base = g.w_o + (layer * H + a[0]) * Q;
      s.rows = a[1] - a[0];
      s.row_elems = (int)Q;
      s.row_stride = Q;
      break;
    case OP_ATTN_O_PROJ: {  // W_o columns of heads [a[2], a[3]) of group a[1], rows [a[4], a[5])
      const long long head0 = (long long)a[1] * (g.n_heads / g.n_kv) + a[2];
      s.base = g.w_o + (layer * H + a[4]) * Q + head0 * g.head_dim;
      s.rows = a[5] - a[4];
      s.row_elems = (a[3] - a[2]) * g.head_dim;
      s.row_stride = Q;
      break;
    }
    case OP_RMS_GATE_UP_SILU:
      s.base = g.w_gate_up + (layer * 2 * I + 2LL * a[0]) * H;
      s.rows = 2 * (a[1] - a[0]);
      s.row_elems = (int)H;
      s.row_stride = H;
      break;
    case OP_DOWN_RESIDUAL:
      s.base = g.w_down + (layer * H + a[0]) * I + a[2];
      s.rows = a[1] - a[0];
      s.row_elems = a[3] - a[2];
      s.row_stride = I;
      break;
    case OP_LM_HEAD:
      s.base = g.lm_head + (long long)a[0] * H;
      s.rows = a[1] - a[0];
      s.row_elems = (int)H;
      s.row_stride = H;
      break;
    default:
      break;
  }
  return s;
}

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
