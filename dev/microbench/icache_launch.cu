// icache_launch.cu: is an SM's instruction cache cold again at every kernel launch?
// (The megakernel's layer 0 runs its page math 3-4x slower than later layers in the same launch, although
// the previous launch's LM head ran the same code on every SM just before.)
// One warp per SM runs a straight-line block of N independent FMAs twice (same code addresses), timing
// each pass with clock64; the kernel is launched three times in a row. If pass 1 is slow in every launch
// while pass 2 is fast, the instruction cache does not survive a launch boundary.
// Build and run: nvcc -O3 -arch=sm_90a -o /tmp/icl dev/microbench/icache_launch.cu && /tmp/icl
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

template <int N>
__global__ void big(float* out, long long* t, float b, float c) {
  float a[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) a[i] = threadIdx.x + i;
#pragma unroll 1
  for (int it = 0; it < 2; ++it) {
    const long long t0 = clock64();
#pragma unroll
    for (int k = 0; k < N / 16; ++k)
#pragma unroll
      for (int i = 0; i < 16; ++i) a[i] = fmaf(a[i], b, c);
    const long long t1 = clock64();
    if (threadIdx.x == 0) t[blockIdx.x * 2 + it] = t1 - t0;
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 16; ++i) s += a[i];
  out[blockIdx.x * 32 + threadIdx.x] = s;
}

template <int N>
int run(int sms, float* out, long long* d_t) {
  std::vector<long long> h(sms * 2);
  for (int launch = 1; launch <= 3; ++launch) {
    big<N><<<sms, 32>>>(out, d_t, 1.0001f, 0.5f);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), d_t, sms * 2 * sizeof(long long), cudaMemcpyDeviceToHost));
    std::vector<long long> p1, p2;
    for (int b = 0; b < sms; ++b) { p1.push_back(h[2 * b]); p2.push_back(h[2 * b + 1]); }
    std::sort(p1.begin(), p1.end());
    std::sort(p2.begin(), p2.end());
    printf("N %5d FMAs (%4d KB SASS)  launch %d  pass 1 median %7lld cycles  pass 2 median %7lld cycles\n", N,
           N * 16 / 1024, launch, p1[sms / 2], p2[sms / 2]);
  }
  return 0;
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* out;
  long long* d_t;
  CHECK(cudaMalloc(&out, sms * 32 * sizeof(float)));
  CHECK(cudaMalloc(&d_t, sms * 2 * sizeof(long long)));
  if (run<1024>(sms, out, d_t) || run<4096>(sms, out, d_t) || run<16384>(sms, out, d_t)) return 1;
  return 0;
}
