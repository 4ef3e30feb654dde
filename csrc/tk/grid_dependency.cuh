// grid_dependency.cuh: programmatic dependent launch (PDL, sm_90). A kernel launched with the
// programmatic-stream-serialization attribute may start while the kernel before it in the stream still
// runs; its blocks take SMs as the earlier kernel's blocks exit, do work that reads nothing the earlier
// kernel writes, and wait for it before anything else. In a kernel launched without the attribute both
// calls return at once, so code using them is correct either way.
#pragma once

#include "util.cuh"

namespace mk::tk {

// Host: launch `kernel` on `stream`; with pdl, with the programmatic-stream-serialization attribute, so it may
// start while the kernel before it in the stream still runs (it waits in wait_prerequisite_grids).
template <typename... Params, typename... Args>
void launch_maybe_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                      Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl ? &attribute : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  MK_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// Lets the next kernel in the stream launch (its blocks still need free SM resources to start). Once every
// block of this grid has called it or exited, the dependent grid may begin.
__device__ __forceinline__ void allow_dependent_grids() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Blocks the calling thread until every grid this one depends on has completed and its memory operations
// are visible to this grid. Each thread that reads the earlier grid's results calls it (or follows a barrier
// after a thread that did).
__device__ __forceinline__ void wait_prerequisite_grids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace mk::tk
