// grid_dependency.cuh: programmatic dependent launch (PDL, sm_90). A kernel launched with the
// programmatic-stream-serialization attribute may start while the kernel before it in the stream still
// runs; its blocks take SMs as the earlier kernel's blocks exit, do work that reads nothing the earlier
// kernel writes, and wait for it before anything else. In a kernel launched without the attribute both
// calls return at once, so code using them is correct either way.
#pragma once

namespace mk::tk {

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
