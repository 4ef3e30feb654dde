// page_matvec.cu: what one consumer warp's 16 KB weight page costs, alone on one block, for the CUDA-core
// path (dot_rows) and the tensor-core path (dot_page_mma) of csrc/interpreter. A diagnostic, not part of
// the product. On the GPU machine:
//   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -I csrc \
//        -o /tmp/page_matvec dev/microbench/page_matvec.cu && /tmp/page_matvec
// Columns: row length K (rows per page = 8192 / K), computing warps (1, or 8 on the same page at once),
// whether two more warps stay resident (asleep) while it runs, then cycles and ns of the last repetition.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "interpreter/consumer_matvec.cuh"

using namespace mk::vm;

constexpr int THREADS = 320;  // 8 computing warps + 2 that either exit at once or sleep until the end

template <bool MMA>
__global__ void page_kernel(const uint4* page_src, const float* x_src, float* out, long long* cycles, int K,
                            int warps, bool resident) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* page = smem;
  float* x = reinterpret_cast<float*>(smem + PAGE_BYTES);
  float* o = x + 8192;
  __shared__ volatile int done;
  for (int i = threadIdx.x; i < PAGE_BYTES / 16; i += blockDim.x) reinterpret_cast<uint4*>(page)[i] = page_src[i];
  for (int i = threadIdx.x; i < K; i += blockDim.x) {  // the tensor-core path reads x as bf16 (activations.cuh)
    if (MMA) reinterpret_cast<__nv_bfloat16*>(x)[i] = __float2bfloat16(x_src[i]);
    else x[i] = x_src[i];
  }
  if (threadIdx.x == 0) done = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32, rows = 8192 / K;
  if (warp >= 8) {
    while (resident && !done) __nanosleep(100);
    return;
  }
  const uint32_t pa = mk::tk::smem_addr(page), xa = mk::tk::smem_addr(x);
  for (int rep = 0; rep < 4; ++rep) {  // the first repetitions warm the instruction cache
    asm volatile("bar.sync 1, 256;");
    const long long c0 = clock64();
    const uint64_t t0 = mk::tk::globaltimer();
    if (warp < warps) {
      if (MMA) {
        dot_page_mma(pa, K * 2, rows, K, xa, o, 0);
      } else {
        constexpr int R = ROWS_PER_CALL<1>;
        int r = 0;
        for (; r + R <= rows; r += R) dot_rows<1, true>(pa, K * 2, r, R, K, xa, 1, o, r, rows);
        if (r < rows) dot_rows<1, false>(pa, K * 2, r, rows - r, K, xa, 1, o, r, rows);
      }
    }
    __syncwarp();
    const long long c1 = clock64();
    const uint64_t t1 = mk::tk::globaltimer();
    if (threadIdx.x == 0 && rep == 3) {
      cycles[0] = c1 - c0;
      cycles[1] = (long long)(t1 - t0);
    }
  }
  asm volatile("bar.sync 1, 256;");
  if (threadIdx.x == 0) done = 1;
  if (threadIdx.x < rows) out[threadIdx.x] = o[threadIdx.x];
}

int main() {
  static unsigned short w[8192];
  static float x[8192];
  for (int i = 0; i < 8192; ++i) {  // weights exact in bf16; x in [-1, 1]
    const float v = ((i * 37 % 101) - 50) / 50.f;
    unsigned u;
    memcpy(&u, &v, 4);
    w[i] = u >> 16;
    x[i] = ((i * 13 % 7) - 3) / 3.f;
  }
  uint4* d_page;
  float *d_x, *d_out;
  long long* d_cycles;
  MK_CUDA_CHECK(cudaMalloc(&d_page, PAGE_BYTES));
  MK_CUDA_CHECK(cudaMalloc(&d_x, sizeof(x)));
  MK_CUDA_CHECK(cudaMalloc(&d_out, 64 * sizeof(float)));
  MK_CUDA_CHECK(cudaMalloc(&d_cycles, 2 * sizeof(long long)));
  MK_CUDA_CHECK(cudaMemcpy(d_page, w, PAGE_BYTES, cudaMemcpyHostToDevice));
  MK_CUDA_CHECK(cudaMemcpy(d_x, x, sizeof(x), cudaMemcpyHostToDevice));
  const int smem = PAGE_BYTES + 8192 * 4 + 64 * 4;
  MK_CUDA_CHECK(cudaFuncSetAttribute(page_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  MK_CUDA_CHECK(cudaFuncSetAttribute(page_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  printf("    K  warps resident  path   cycles      ns   row0      ref\n");
  for (int K : {512, 2048, 4096, 8192})
    for (int warps : {1, 8})
      for (int resident = 0; resident < 2; ++resident)
        for (int mma = 0; mma < 2; ++mma) {
          if (mma) page_kernel<true><<<1, THREADS, smem>>>(d_page, d_x, d_out, d_cycles, K, warps, resident);
          else page_kernel<false><<<1, THREADS, smem>>>(d_page, d_x, d_out, d_cycles, K, warps, resident);
          MK_CUDA_CHECK_LAUNCH_SYNC();
          long long c[2];
          float row0;
          MK_CUDA_CHECK(cudaMemcpy(c, d_cycles, sizeof(c), cudaMemcpyDeviceToHost));
          MK_CUDA_CHECK(cudaMemcpy(&row0, d_out, sizeof(float), cudaMemcpyDeviceToHost));
          double ref = 0;
          for (int k = 0; k < K; ++k) {
            const unsigned u = (unsigned)w[k] << 16;
            float wf;
            memcpy(&wf, &u, 4);
            ref += wf * x[k];
          }
          printf("%5d  %5d  %8d  %-5s %7lld %7lld  %7.4f  %7.4f\n", K, warps, resident, mma ? "mma" : "cuda", c[0],
                 c[1], row0, ref);
        }
  return 0;
}
