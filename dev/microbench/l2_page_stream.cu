// l2_page_stream.cu: how fast can every SM stream 16 KB pages into shared memory through the TMA engine, from L2 (a
// buffer that fits it) and from HBM (one that does not)? A diagnostic, not part of the product.
//
// Why: a 2 048-token prompt chunk of the 1B runs ~2.0 M tile page visits (QKV, O, gate/up, down; 16 layers), each
// moving a 16 KB weight page and a 16 KB input stage into shared memory: ~67 GB in the ~18 ms its tiles take, ~3.7
// TB/s. Taking the pages in pairs (fewer barriers per page) did not move it, nor did more x stages in flight, so the
// prefill may be bound by this copy rate itself; if so, only tiles that move fewer bytes per product (256 rows or
// 256 tokens a K step) make it faster. This measures the rate with nothing else running: one thread per SM keeps
// `depth` copies in flight (each `pieces` bulk copies: 1 x 16 KB like a bulk page, 4 x 4 KB like a tile page's four
// boxes), over `region` MB of the buffer, every SM starting at a different page.
// On the GPU machine:
//   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 -I csrc -o /tmp/l2_page_stream \
//        dev/microbench/l2_page_stream.cu && /tmp/l2_page_stream
#include <cstdio>
#include <cuda_runtime.h>

#include "check.cuh"

#include "tk/tma.cuh"

namespace {

constexpr int PAGE = 16384;
constexpr int MAX_DEPTH = 12;

__global__ void __launch_bounds__(32) stream_pages(const uint8_t* buf, long long region_pages, int pages_per_sm,
                                                   int depth, int pieces, unsigned long long* sink) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ mk::tk::semaphore full[MAX_DEPTH];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < depth; ++s) mk::tk::init_semaphore(full[s], 1);
  mk::tk::fence_semaphore_init();
  const uint32_t piece = PAGE / pieces;
  long long page = (long long)blockIdx.x * 997 % region_pages;
  for (int i = 0; i < pages_per_sm; ++i) {
    const int s = i % depth;
    if (i >= depth) {  // the copy `depth` pages ago into this slot has landed
      while (!mk::tk::try_wait(full[s], (uint32_t)((i / depth - 1) & 1))) {
      }
    }
    mk::tk::arrive_expect_tx(full[s], PAGE);
    for (int p = 0; p < pieces; ++p)
      mk::tk::bulk_load(ring + s * PAGE + p * piece, buf + page * PAGE + p * piece, piece, full[s]);
    page = page + 1 == region_pages ? 0 : page + 1;
  }
  for (int i = pages_per_sm; i < pages_per_sm + depth; ++i) {  // drain
    const int s = i % depth;
    if (i >= depth)
      while (!mk::tk::try_wait(full[s], (uint32_t)((i / depth - 1) & 1))) {
      }
  }
  sink[blockIdx.x] = ring[0];  // keep the copies observable
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long long buf_bytes = 1024LL << 20;
  uint8_t* buf = nullptr;
  unsigned long long* sink = nullptr;
  CHECK(cudaMalloc(&buf, buf_bytes));
  CHECK(cudaMemset(buf, 1, buf_bytes));
  CHECK(cudaMalloc(&sink, sms * sizeof(unsigned long long)));
  CHECK(cudaFuncSetAttribute(stream_pages, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX_DEPTH * PAGE));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("%d SMs; GB/s into shared memory, all SMs together\n", sms);
  std::printf("%10s %6s %7s %10s\n", "region_MB", "depth", "pieces", "GB/s");
  const int pages_per_sm = 4096;  // 64 MB per SM
  for (long long region_mb : {16LL, 32LL, 1024LL}) {
    for (int pieces : {1, 4}) {
      for (int depth : {2, 4, 8, 12}) {
        const long long region_pages = (region_mb << 20) / PAGE;
        stream_pages<<<sms, 32, MAX_DEPTH * PAGE>>>(buf, region_pages, 256, depth, pieces, sink);  // warm L2
        CHECK(cudaEventRecord(a));
        stream_pages<<<sms, 32, MAX_DEPTH * PAGE>>>(buf, region_pages, pages_per_sm, depth, pieces, sink);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaGetLastError());
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        const double gbs = (double)sms * pages_per_sm * PAGE / (ms * 1e-3) / 1e9;
        std::printf("%10lld %6d %7d %10.0f\n", region_mb, depth, pieces, gbs);
      }
    }
  }
  return 0;
}
