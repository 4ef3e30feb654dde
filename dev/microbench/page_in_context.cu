// page_in_context.cu: why is one warp's tensor-core page (dot_page_mma) ~4x slower inside the megakernel
// (≈ 1.5 µs per page: "last page" intervals in a profile) than alone (≈ 770 cycles)? One warp computes a
// 16 KB page of 4 x 2048 rows again and again while the rest of the block does what the kernel's other
// warps do, alone or on every SM at once. A diagnostic, not part of the product. On the GPU machine:
//   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -I csrc \
//        -o /tmp/page_in_context dev/microbench/page_in_context.cu && /tmp/page_in_context
// Background (bit mask): 1 = a loader warp streams 16 KB bulk copies from a 2 GB buffer (HBM) into an
// 8-page ring, 3 in flight; 2 = a warp spins on mbarrier.try_wait; 4 = seven consumer warps wait at a
// named barrier; 8 = a warp spins on an acquire load of a global flag (a dependency poll); 16 = 16-192 KB
// of other code runs between two pages (instruction-cache misses at the page's start).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "interpreter/dot_rows_mma.cuh"
#include "tk/atomics.cuh"
#include "tk/mbarrier.cuh"
#include "tk/tma.cuh"

using namespace mk::vm;

constexpr int K = 2048, ROWS = 4, ROW_BYTES = K * 2, PAGE = ROWS * ROW_BYTES;
constexpr int RING = 8, REPS = 16;
constexpr long long STREAM_BYTES = 2LL << 30;

struct alignas(8) Bars {
  mk::tk::semaphore full[RING];
  mk::tk::semaphore never;
};

// Straight-line code far larger than the instruction caches (16 B per FFMA): run between two pages it
// evicts the page loop's code, so the next page starts with instruction-cache misses (mode bit 16).
template <int N>
__device__ __noinline__ float evict_icache(float v) {
#pragma unroll
  for (int i = 0; i < N; ++i) v = fmaf(v, 1.0001f, 0.5f);
  return v;
}

__global__ void context_kernel(const uint8_t* stream, const float* x_src, const int* flag, float* out,
                               long long* cycles, int mode, int evict_k) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* ring = smem;
  uint8_t* page = smem + RING * PAGE;
  float* x = reinterpret_cast<float*>(page + PAGE);
  float* o = x + K;
  Bars* bars = reinterpret_cast<Bars*>(o + 64);
  __shared__ volatile int done;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < PAGE / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(page)[i] = 0x3c003c00u + i % 97;
  // the tensor-core path reads x as bf16 (activations.cuh)
  for (int i = threadIdx.x; i < K; i += blockDim.x) reinterpret_cast<__nv_bfloat16*>(x)[i] = __float2bfloat16(x_src[i]);
  if (threadIdx.x == 0) {
    for (int i = 0; i < RING; ++i) mk::tk::init_semaphore(bars->full[i], 1);
    mk::tk::init_semaphore(bars->never, 1);
    done = 0;
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  if (warp == 0) {
    const uint32_t pa = mk::tk::smem_addr(page), xa = mk::tk::smem_addr(x);
    long long total = 0;
    float junk = x[lane];
    for (int rep = 0; rep < REPS; ++rep) {
      if (mode & 16) {  // other code between pages: 16 B per FFMA, so 1000 = 16 KB
        switch (evict_k) {
          case 1: junk = evict_icache<1000>(junk); break;
          case 2: junk = evict_icache<2000>(junk); break;
          case 4: junk = evict_icache<4000>(junk); break;
          case 8: junk = evict_icache<8000>(junk); break;
          default: junk = evict_icache<12000>(junk); break;
        }
      }
      const long long c0 = clock64();
      dot_page_mma(pa, ROW_BYTES, ROWS, K, xa, o, 0);
      __syncwarp();
      const long long c1 = clock64();
      if (rep >= 4) total += c1 - c0;  // the first repetitions warm the instruction cache
    }
    if (lane == 0) {
      cycles[blockIdx.x] = total / (REPS - 4);
      out[blockIdx.x] = o[0] + junk;
      done = 1;
    }
    __syncwarp();
  } else if (warp <= 7) {
    if (mode & 4) asm volatile("bar.sync 1, 256;");  // released by warp 8 at the end
  } else if (warp == 8) {
    if (mode & 1) {  // the loader: 3 copies in flight through the ring
      long long off = (long long)blockIdx.x * PAGE * 64;
      uint32_t n = 0;
      for (; !done; ++n) {
        const int slot = n % RING;
        if (n >= 3) {
          const uint32_t old = n - 3;
          while (!mk::tk::try_wait(bars->full[old % RING], (old / RING) & 1)) {}
        }
        if (lane == 0) {
          mk::tk::arrive_expect_tx(bars->full[slot], PAGE);
          mk::tk::bulk_load<mk::tk::cache_hint::evict_first>(ring + slot * PAGE, stream + off, PAGE, bars->full[slot]);
        }
        __syncwarp();
        off = (off + PAGE * 132LL) % STREAM_BYTES;
      }
      for (uint32_t m = n >= 3 ? n - 3 : 0; m < n; ++m)  // every copy lands before the block exits
        while (!mk::tk::try_wait(bars->full[m % RING], (m / RING) & 1)) {}
    }
    if (mode & 4) asm volatile("bar.sync 1, 256;");
  } else if (warp == 9) {
    if (mode & 2)
      while (!done) mk::tk::try_wait(bars->never, 0);
    else if (mode & 8)
      while (!done) (void)mk::tk::load_acquire(flag);
  }
  __syncthreads();
}

int main() {
  int sms = 0;
  MK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint8_t* d_stream;
  float *d_x, *d_out;
  int* d_flag;
  long long* d_cycles;
  MK_CUDA_CHECK(cudaMalloc(&d_stream, STREAM_BYTES));
  MK_CUDA_CHECK(cudaMemset(d_stream, 0x3c, STREAM_BYTES));
  MK_CUDA_CHECK(cudaMalloc(&d_x, K * sizeof(float)));
  MK_CUDA_CHECK(cudaMemset(d_x, 0, K * sizeof(float)));
  MK_CUDA_CHECK(cudaMalloc(&d_flag, sizeof(int)));
  MK_CUDA_CHECK(cudaMemset(d_flag, 0, sizeof(int)));
  MK_CUDA_CHECK(cudaMalloc(&d_out, sms * sizeof(float)));
  MK_CUDA_CHECK(cudaMalloc(&d_cycles, sms * sizeof(long long)));
  const int smem = RING * PAGE + PAGE + K * 4 + 64 * 4 + (int)sizeof(Bars);
  MK_CUDA_CHECK(cudaFuncSetAttribute(context_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  printf("mode: 1 loader streams HBM, 2 mbarrier spinner, 4 consumers at a barrier, 8 global acquire poll\n");
  for (int grid : {1, sms})
    for (int mode : {0, 4, 2, 8, 1, 5, 7, 13, 16, 17, 23}) {
      context_kernel<<<grid, 320, smem>>>(d_stream, d_x, d_flag, d_out, d_cycles, mode, 12);
      MK_CUDA_CHECK_LAUNCH_SYNC();
      static long long c[1024];
      MK_CUDA_CHECK(cudaMemcpy(c, d_cycles, grid * sizeof(long long), cudaMemcpyDeviceToHost));
      long long sum = 0, mx = 0;
      for (int b = 0; b < grid; ++b) {
        sum += c[b];
        mx = c[b] > mx ? c[b] : mx;
      }
      printf("grid %3d  mode %2d  page cycles mean %6lld  max %6lld\n", grid, mode, sum / grid, mx);
    }
  // Instruction-cache reach: how much other code between two pages makes the page's code cold.
  for (int mode : {16, 17})
    for (int k : {1, 2, 4, 8, 12}) {
      context_kernel<<<sms, 320, smem>>>(d_stream, d_x, d_flag, d_out, d_cycles, mode, k);
      MK_CUDA_CHECK_LAUNCH_SYNC();
      static long long c[1024];
      MK_CUDA_CHECK(cudaMemcpy(c, d_cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
      long long sum = 0;
      for (int b = 0; b < sms; ++b) sum += c[b];
      printf("grid %3d  mode %2d  other code %3d KB  page cycles mean %6lld\n", sms, mode, k * 16, sum / sms);
    }
  return 0;
}
