// l2_prefetch.cuh: pulling weight rows into L2 ahead of the page ring (no shared memory touched).
#pragma once

#include "code_size.cuh"

#include "../tk/tma.cuh"
#include "weight_stream.cuh"

namespace mk::vm {

// Two L2 prefetches try to keep HBM busy while SMs wait on dependencies: the controller pulls the
// first Globals::l2_prefetch_bytes of every instruction it fetches (up to NUM_SLOTS - 1 instructions
// ahead of the loader), and the loader, on reaching an instruction, the next
// Globals::l2_beyond_ring_bytes past what the page ring holds (only for the opcodes in
// Globals::l2_beyond_ring_ops: those whose loads start while the SM's consumers are still on latency-bound
// ops, so the prefetch fills idle HBM time instead of queueing behind a running weight stream). Both are host knobs (CudaBackend),
// bounded so that all SMs together stay inside L2.

// Pulls rows [first, first + cap_bytes) of an instruction's weights into L2, spread over `lanes` lanes
// (this one is `lane`): the controller's 32, the loader's one.
__device__ __forceinline__ void prefetch_rows_l2(const WeightStream& ws, int first, int cap_bytes, int lane, int lanes) {
  if (ws.rows <= first || cap_bytes <= 0) return;
  const int row_bytes = ws.row_bytes();
  const int rows = min(ws.rows - first, cap_bytes / row_bytes);
  if (ws.row_stride == ws.row_elems) {  // contiguous: 32 KiB pieces spread over the lanes
    const long long bytes = (long long)rows * row_bytes;
    const uint8_t* base = ws.row(first);
    MK_ROLLED
    for (long long off = lane * 32768LL; off < bytes; off += lanes * 32768LL)
      tk::bulk_prefetch_l2(base + off, (uint32_t)min(32768LL, bytes - off));
  } else {
    MK_ROLLED
    for (int r = lane; r < rows; r += lanes)
      tk::bulk_prefetch_l2(ws.row(first + r), row_bytes);
  }
}

}  // namespace mk::vm
