// tile_visit.cu: what one tile page visit costs the consumers with its data already in shared memory, piece by
// piece. A diagnostic, not part of the product.
//
// Why: the megakernel's tiles take 0.67 us (wide, 128 tokens x 128 rows) and 0.86 us (narrow, 64 tokens) per K-step
// page visit (1B, H200 profiles), against ~0.26 us of tensor-core products at the peak rate. This runs the consumers'
// loop alone on every SM - 256 threads, two warpgroups, operands resident in shared memory - and adds its pieces one
// at a time: the products (four wgmma per warpgroup and K step, committed and waited), the CTA barrier, the two
// mbarrier waits (already complete), pairs of K steps per group, and one group kept in flight across visits
// (wait<1>). Measured (H200, docs/PERFORMANCE.md "What a prefill page visit waits for"): the kernel's wide loop alone
// takes 0.34 us a visit, half the kernel's; the rest is waiting for the copies (Nsight Compute, dev/ncu_source.sh).
// On the GPU machine:
//   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -I csrc \
//        -o /tmp/tile_visit dev/microbench/tile_visit.cu && /tmp/tile_visit
#include <cstdio>
#include <cuda_runtime.h>

#include "check.cuh"

#include "tk/mbarrier.cuh"
#include "tk/wgmma.cuh"

namespace {

constexpr int THREADS = 256;  // two consumer warpgroups, as the megakernel's
constexpr int STAGE = 16384;  // a page (128 rows x 64 bf16) or a wide x stage (128 tokens x 64 bf16)
constexpr int VISITS = 4096;

// One K step of one warpgroup: four wgmma of 16 columns (wide: 64 tokens x 128 rows; narrow: 64 x 64).
template <bool WIDE, int N>
__device__ __forceinline__ void k_step(float (&acc)[N][4], uint64_t a, uint64_t b) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if constexpr (WIDE) {
      mk::tk::wgmma_m64n128k16_bf16(acc, a + 2 * kk, b + 2 * kk);
    } else {
      mk::tk::wgmma_m64n64k16_bf16(acc, a + 2 * kk, b + 2 * kk);
    }
  }
}

template <bool WIDE, bool BARRIER, bool WAITS, bool PAIRS, bool IN_FLIGHT>
__global__ void __launch_bounds__(THREADS, 1) visits(unsigned long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];  // page 0, page 1, stage 0, stage 1
  __shared__ mk::tk::semaphore ready[2];
  constexpr int N = WIDE ? 16 : 8;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (auto& r : ready) {
      mk::tk::init_semaphore(r, 1);
      mk::tk::arrive(r);  // phase 0 complete: every wait below passes at the first try, as in the kernel
    }
    mk::tk::fence_semaphore_init();
  }
  for (int i = threadIdx.x; i < 4 * STAGE / 16; i += THREADS)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t base = mk::tk::smem_addr(smem);
  // this warpgroup's rows of a page (narrow: its 64) and tokens of a stage (wide: its 64)
  const uint32_t b_off = WIDE ? 0 : wg * 64 * 128, a_off = WIDE ? wg * 64 * 128 : 0;
  float acc[N][4];
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  const long long t0 = clock64();
  constexpr int STEP = PAIRS ? 2 : 1;
  for (int v = 0; v < VISITS; v += STEP) {
    if constexpr (WAITS) {
#pragma unroll
      for (int s = 0; s < 2 * STEP; ++s)
        while (!mk::tk::try_wait(ready[s & 1], 0)) {
        }
    }
    if constexpr (BARRIER) asm volatile("bar.sync 1, 256;" ::: "memory");
    mk::tk::wgmma_fence();
#pragma unroll
    for (int k = 0; k < STEP; ++k) {
      const uint32_t page = base + ((v + k) & 1) * STAGE, stage = base + (2 + ((v + k) & 1)) * STAGE;
      k_step<WIDE>(acc, mk::tk::wgmma_desc_sw128(stage + a_off), mk::tk::wgmma_desc_sw128(page + b_off));
    }
    mk::tk::wgmma_commit();
    if constexpr (IN_FLIGHT) {
      mk::tk::wgmma_wait<1>();
    } else {
      mk::tk::wgmma_wait<0>();
    }
  }
  mk::tk::wgmma_wait<0>();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) s += acc[j][0];
  if (s == 1.f) sink[threadIdx.x] = s;  // keeps the products
  if (threadIdx.x == 0) cycles[blockIdx.x] = (unsigned long long)(t1 - t0);
}

template <bool WIDE, bool BARRIER, bool WAITS, bool PAIRS, bool IN_FLIGHT>
int measure(const char* name, int sms, int clock_khz, unsigned long long* cycles, float* sink) {
  auto* kernel = visits<WIDE, BARRIER, WAITS, PAIRS, IN_FLIGHT>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * STAGE));
  kernel<<<sms, THREADS, 4 * STAGE>>>(cycles, sink);  // warm-up
  kernel<<<sms, THREADS, 4 * STAGE>>>(cycles, sink);
  CHECK(cudaDeviceSynchronize());
  unsigned long long host[1024];
  CHECK(cudaMemcpy(host, cycles, sms * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  unsigned long long worst = 0, sum = 0;
  for (int i = 0; i < sms; ++i) {
    sum += host[i];
    worst = host[i] > worst ? host[i] : worst;
  }
  const double mean = (double)sum / sms / VISITS;
  std::printf("%-44s %9.1f %9.1f %9.3f\n", name, mean, (double)worst / VISITS, mean / clock_khz * 1e3);
  return 0;
}

}  // namespace

int main() {
  int sms = 0, clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  unsigned long long* cycles = nullptr;
  float* sink = nullptr;
  CHECK(cudaMalloc(&cycles, sms * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&sink, THREADS * sizeof(float)));
  std::printf("%d SMs, %d MHz; per K-step page visit, every SM running the loop (us at that clock)\n", sms,
              clock_khz / 1000);
  std::printf("%-44s %9s %9s %9s\n", "variant", "cycles", "worst SM", "us");
  int rc = 0;
  // <wide, barrier, waits, pairs, in flight>
  rc |= measure<true, false, false, false, false>("wide: products, wait<0>", sms, clock_khz, cycles, sink);
  rc |= measure<true, true, false, false, false>("wide: + CTA barrier", sms, clock_khz, cycles, sink);
  rc |= measure<true, true, true, false, false>("wide: + page and stage waits (as the kernel)", sms, clock_khz,
                                                cycles, sink);
  rc |= measure<true, true, true, true, false>("wide: pairs (the kernel's bf16 loop)", sms, clock_khz, cycles, sink);
  rc |= measure<true, true, true, false, true>("wide: one group in flight (wait<1>)", sms, clock_khz, cycles, sink);
  rc |= measure<false, false, false, false, false>("narrow: products, wait<0>", sms, clock_khz, cycles, sink);
  rc |= measure<false, true, true, false, false>("narrow: + barrier and waits", sms, clock_khz, cycles, sink);
  rc |= measure<false, true, true, true, false>("narrow: pairs", sms, clock_khz, cycles, sink);
  rc |= measure<false, true, true, false, true>("narrow: one group in flight (wait<1>)", sms, clock_khz, cycles,
                                                sink);
  return rc;
}
