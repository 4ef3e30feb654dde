// code_size.cuh: keeping the persistent kernel's code compact.
//
// The interpreter is one kernel function of several hundred KB of SASS, and what an SM runs per layer is
// spread over far more code than its instruction caches hold, so code that sits between the instructions a
// layer executes costs time even when it never runs.
// nvcc unrolls a loop with a run-time trip count (typically 4x, plus remainder code), which is pure waste for
// the many loops that make one pass or none in batch-1 decode: a block-strided loop over one token's outputs,
// a page's remaining tail chunks, a loader's per-row copies. MK_ROLLED before such a loop keeps it rolled.
// Measured on the 1B shape (H200, same-run A/Bs, every round): the loader's and the L2 prefetch's loops
// 0.763 -> 0.751 ms/token, the ops' input and epilogue loops 0.747 -> 0.733, the page loop's tail loops
// 0.775 -> 0.763. Not every rolled loop gains: the attention's per-head loops and the deferred frees measured
// 0.731 -> 0.734 rolled, so each use is measured, not assumed.
#pragma once

#define MK_ROLLED _Pragma("unroll 1")
