// check.cuh: the microbenchmarks' CUDA call check: prints the failing call with its error and returns 1 from main
// (or from the int function it is used in).
#pragma once

#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    const cudaError_t e = (call);                                                             \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)
