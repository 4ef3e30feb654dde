// ops/scale_rows.cuh: SCALE_ROWS, the toy opcode of tests/instructions/toy_scale_rows.py (operands row_begin,
// row_end): hidden[:, r] *= 2 for the step's tokens. test_toy_opcode.py copies it into a copy of
// csrc/interpreter/ops/ and compiles the kernel with it (docs/ADDING_AN_OPCODE.md).
#pragma once

#include "../op_traits.cuh"
#include "../state.cuh"

namespace mk::vm {

__device__ void op_scale_rows(const Globals& g, const int* w) {
  const StepArgs sa(g);
  const int T = sa.num_tokens(), row_begin = w[W_OPERANDS], n = w[W_OPERANDS + 1] - row_begin, H = g.hidden_size;
  for (int idx = threadIdx.x; idx < T * n; idx += CONSUMER_THREADS) {
    float* p = g.hidden + (long long)(idx / n) * H + row_begin + idx % n;
    *p = load_cg(p) * 2.f;  // written by other SMs in this launch: an L2 load
  }
}

template <>
struct Op<OP_SCALE_ROWS> : OpTraits {
  static constexpr bool in_variant(int v) { return v == VARIANT_GENERAL; }  // not in the batch-1 kernels
  template <bool B1>
  __device__ __forceinline__ static bool execute(const Globals& g, const Shared&, const int* w) {
    op_scale_rows(g, w);
    return true;
  }
};

}  // namespace mk::vm
