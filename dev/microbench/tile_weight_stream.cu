// tile_weight_stream.cu: how fast can every SM stream a weight matrix from HBM in the tile pages' order (a block of
// 128 rows, its K steps one after another, each K step a 128-row x 64-column box set of the row-major matrix) against
// the same bytes as contiguous 16 KB pages? A diagnostic, not part of the product.
//
// Why: a batch-32 decode step's tiles stream the weights at ~1.9 TB/s (1B, H200: gate/up's 67 MB a layer in ~35 us),
// where batch 1's contiguous pages reach ~3.8 TB/s; lifting the loader's in-flight cap (4 pages -> none) gained 3 %
// and an L2 prefetch of the tiles' rows lost 10 %. A tile page reads 128 bytes from each of 128 rows 4 KB apart, a
// bulk page 16 KB in a row; if HBM serves the first pattern at a fraction of the second's rate, only a layout whose
// tile pages are contiguous streams at the floor.
// Modes: bulk (one 16 KB copy per page, the rows of the block in order), boxes32 (four 32-row boxes per K step, as the
// kernel's tile pages), box128 (one 128-row box per K step). Each SM keeps `depth` pages in flight.
// On the GPU machine:
//   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -I csrc \
//        -o /tmp/tile_weight_stream dev/microbench/tile_weight_stream.cu && /tmp/tile_weight_stream
#include <cstdio>
#include <cuda_runtime.h>

#include "check.cuh"

#include "tk/tensor_map.cuh"
#include "tk/tma.cuh"

namespace {

constexpr int PAGE = 16384;
constexpr int MAX_DEPTH = 12;
constexpr int K = 2048;         // columns (bf16): a 4 KB row, the 1B's hidden size
constexpr int BLOCK_ROWS = 128;  // rows of a tile
constexpr int K_STEPS = K / 64;  // pages per block
constexpr long long ROWS = 262144;  // 1 GiB: far past L2
enum Mode : int { BULK = 0, BOXES32 = 1, BOX128 = 2 };

__global__ void __launch_bounds__(32) stream_blocks(const __grid_constant__ CUtensorMap map32,
                                                    const __grid_constant__ CUtensorMap map128, const uint8_t* buf,
                                                    int blocks_per_sm, int depth, int mode,
                                                    unsigned long long* sink) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ mk::tk::semaphore full[MAX_DEPTH];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < depth; ++s) mk::tk::init_semaphore(full[s], 1);
  mk::tk::fence_semaphore_init();
  const int pages = blocks_per_sm * K_STEPS;
  for (int i = 0; i < pages + depth; ++i) {
    const int s = i % depth;
    if (i >= depth) {  // the copy `depth` pages ago into this slot has landed
      while (!mk::tk::try_wait(full[s], (uint32_t)((i / depth - 1) & 1))) {
      }
    }
    if (i >= pages) continue;  // draining
    const int block = blockIdx.x + (i / K_STEPS) * gridDim.x, step = i % K_STEPS;
    const int row0 = block * BLOCK_ROWS;
    uint8_t* dst = ring + s * PAGE;
    mk::tk::arrive_expect_tx(full[s], PAGE);
    if (mode == BULK) {
      mk::tk::bulk_load<mk::tk::cache_hint::evict_first>(dst, buf + ((long long)row0 * K * 2 + (long long)step * PAGE),
                                                         PAGE, full[s]);
    } else if (mode == BOXES32) {
      for (int b = 0; b < 4; ++b)
        mk::tk::tensor_load_2d<mk::tk::cache_hint::evict_first>(dst + b * 4096, &map32, row0 + 32 * b, 64 * step,
                                                                full[s]);
    } else {
      mk::tk::tensor_load_2d<mk::tk::cache_hint::evict_first>(dst, &map128, row0, 64 * step, full[s]);
    }
  }
  sink[blockIdx.x] = ring[0];  // keep the copies observable
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const long long bytes = ROWS * K * 2;
  uint8_t* buf = nullptr;
  unsigned long long* sink = nullptr;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMemset(buf, 1, bytes));
  CHECK(cudaMalloc(&sink, sms * sizeof(unsigned long long)));
  const auto* m = reinterpret_cast<const __nv_bfloat16*>(buf);
  const CUtensorMap map32 = mk::tk::make_tensor_map_2d(m, ROWS, K, K, 32, 64);
  const CUtensorMap map128 = mk::tk::make_tensor_map_2d(m, ROWS, K, K, 128, 64);
  CHECK(cudaFuncSetAttribute(stream_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX_DEPTH * PAGE));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int blocks_per_sm = (int)(ROWS / BLOCK_ROWS / sms);
  std::printf("%d SMs, %d blocks of 128 x %d bf16 each; GB/s from HBM into shared memory, all SMs together\n", sms,
              blocks_per_sm, K);
  std::printf("%8s %6s %10s\n", "mode", "depth", "GB/s");
  const char* names[] = {"bulk", "boxes32", "box128"};
  for (int mode : {BULK, BOXES32, BOX128}) {
    for (int depth : {2, 4, 8, 12}) {
      float best = 1e30f;
      for (int rep = 0; rep < 3; ++rep) {
        CHECK(cudaEventRecord(a));
        stream_blocks<<<sms, 32, MAX_DEPTH * PAGE>>>(map32, map128, buf, blocks_per_sm, depth, mode, sink);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaGetLastError());
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        best = ms < best ? ms : best;
      }
      const double gbs = (double)sms * blocks_per_sm * BLOCK_ROWS * K * 2 / (best * 1e-3) / 1e9;
      std::printf("%8s %6d %10.0f\n", names[mode], depth, gbs);
    }
  }
  return 0;
}
