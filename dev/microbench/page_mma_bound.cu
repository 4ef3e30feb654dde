// page_mma_bound.cu: which unit bounds the tensor-core page matvec (csrc/interpreter/dot_rows_mma.cuh)?
// NOTE: the interpreter keeps batch-1 x in bf16 for the tensor-core path (activations.cuh), so MmaOperands
// below reads this file's fp32 x as bf16 pairs: its timings hold, its sums do not.
// One 16 KB page of 4 x 2048 rows, computed by 1, 2, 4 or 8 warps at once (warp w runs on SM sub-partition
// w % 4, so 4 warps = one per sub-partition, 8 = two), each on its own copy of the page, in three modes:
// full (the product's loop), mma only (operands loaded once, then the same mma sequence), loads only (the
// same shared loads, no mma). A diagnostic, not part of the product.
// On the GPU machine:
//   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -I csrc \
//        -o /tmp/page_mma_bound dev/microbench/page_mma_bound.cu && /tmp/page_mma_bound
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "interpreter/dot_rows_mma.cuh"

using namespace mk::vm;

// Two floats of x by shared-window address (the variant that reads x as fp32 pairs; the product reads bf16).
__device__ __forceinline__ float2 load_shared_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

constexpr int K = 2048, ROWS = 4, ROW_BYTES = K * 2, PAGE = ROWS * ROW_BYTES;  // 16 KB
// This lane's ldmatrix row address for each row pair of the page (dot_rows_mma's layout).
__device__ __forceinline__ void ldmatrix_rows(uint32_t page_addr, int lane, uint32_t (&lane_row)[2]) {
  for (int p = 0; p < 2; ++p)
    lane_row[p] = page_addr + (uint32_t)((2 * p + ((lane >> 3) & 1)) * ROW_BYTES + ((lane >> 4) & 1) * 128 + (lane & 7) * 16);
}

enum Mode { FULL = 0, MMA_ONLY = 1, LOADS_ONLY = 2, XPACK = 3, LDS = 4, UNROLL4 = 5 };

// The product's loop (mma_loop in dot_rows_mma.cuh) with the iterations unrolled by 4 even when K is a
// run-time value, so loads of later iterations may be issued before earlier mma.
__device__ __forceinline__ void page_unroll4(uint32_t page_addr, uint32_t x_addr, float (&acc)[2][2][4], int klen) {
  const int lane = mk::tk::lane_id();
  uint32_t lane_row[2];
  ldmatrix_rows(page_addr, lane, lane_row);
#pragma unroll 4
  for (int k = 0; k < klen; k += 2 * MMA_CHUNK) {
    MmaOperands<2, 2> ops;
    ops.load(lane_row, x_addr, k, lane);
    ops.multiply(acc);
  }
}

// Row r's dot product from the accumulators (dot_rows_mma's selection: D[8r + q][q]), summed by lane 0.
__device__ float row_sum(const float (&acc)[2][2][4], int r) {
  const int lane = mk::tk::lane_id(), g = lane >> 2, t2 = 2 * (lane & 3), p = r / 2, rr = r % 2;
  float e0 = acc[p][0][2 * rr] + acc[p][1][2 * rr], e1 = acc[p][0][2 * rr + 1] + acc[p][1][2 * rr + 1];
  float v = g == t2 ? e0 : (g == t2 + 1 ? e1 : 0.f);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// XPACK: the product's A (ldmatrix) with x's B fragments pre-packed to bf16 once per op, [chunk][lane]
// (one ld.shared.v2 per chunk, no conversion in the loop).
__device__ __forceinline__ void page_xpack(uint32_t page_addr, uint32_t xf_addr, float (&acc)[2][2][4], int klen) {
  const int lane = mk::tk::lane_id();
  uint32_t lane_row[2];
  ldmatrix_rows(page_addr, lane, lane_row);
  for (int k = 0; k < klen; k += 2 * MMA_CHUNK) {
    uint32_t a[2][2][4], b[2][2];
    for (int c = 0; c < 2; ++c) {
      const float2 f = load_shared_f2(xf_addr + (uint32_t)(((k / MMA_CHUNK + c) * 32 + lane) * 8));
      b[c][0] = __float_as_uint(f.x);
      b[c][1] = __float_as_uint(f.y);
    }
    for (int p = 0; p < 2; ++p)
      for (int c = 0; c < 2; ++c) mk::tk::ldmatrix_x4_shared(a[p][c], lane_row[p] + (uint32_t)(k + c * MMA_CHUNK) * 2);
    for (int p = 0; p < 2; ++p)
      for (int c = 0; c < 2; ++c) mk::tk::detail::mma_16x8x16_acc(acc[p][c], a[p][c], b[c][0], b[c][1]);
  }
}

// LDS: A from ld.shared.v4 with a remapped segment order (per 256-element double chunk, segment q is
// elements [32q, 32q + 32); lane (g, t) reads 8 contiguous elements of each row of the pair: mma c takes
// 4 of them), x pre-packed to match, [double chunk][c][lane].
__device__ __forceinline__ void page_lds(uint32_t page_addr, uint32_t xf_addr, float (&acc)[2][2][4], int klen) {
  const int lane = mk::tk::lane_id(), g = lane >> 2, t = lane & 3;
  for (int k = 0; k < klen; k += 2 * MMA_CHUNK) {
    uint32_t b[2][2];
    for (int c = 0; c < 2; ++c) {
      const float2 f = load_shared_f2(xf_addr + (uint32_t)(((k / MMA_CHUNK + c) * 32 + lane) * 8));
      b[c][0] = __float_as_uint(f.x);
      b[c][1] = __float_as_uint(f.y);
    }
    for (int p = 0; p < 2; ++p) {
      uint4 r0, r1;
      const uint32_t at = page_addr + (uint32_t)(k * 2 + 64 * g + 16 * t);
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r0.x), "=r"(r0.y), "=r"(r0.z), "=r"(r0.w) : "r"(at + (2 * p) * ROW_BYTES));
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r1.x), "=r"(r1.y), "=r"(r1.z), "=r"(r1.w) : "r"(at + (2 * p + 1) * ROW_BYTES));
      const uint32_t a0[4] = {r0.x, r1.x, r0.y, r1.y}, a1[4] = {r0.z, r1.z, r0.w, r1.w};
      mk::tk::detail::mma_16x8x16_acc(acc[p][0], a0, b[0][0], b[0][1]);
      mk::tk::detail::mma_16x8x16_acc(acc[p][1], a1, b[1][0], b[1][1]);
    }
  }
}

template <int MODE>
__device__ __forceinline__ float page_rows(uint32_t page_addr, uint32_t x_addr, int klen) {
  const int lane = mk::tk::lane_id();
  uint32_t lane_row[2];
  ldmatrix_rows(page_addr, lane, lane_row);
  float acc[2][2][4] = {};
  uint32_t sink = 0;
  MmaOperands<2, 2> ops;
  if (MODE == MMA_ONLY) ops.load(lane_row, x_addr, 0, lane);
  for (int k = 0; k < klen; k += 2 * MMA_CHUNK) {
    if (MODE != MMA_ONLY) ops.load(lane_row, x_addr, k, lane);
    if (MODE != LOADS_ONLY) {
      ops.multiply(acc);
    } else {
      for (int p = 0; p < 2; ++p)
        for (int c = 0; c < 2; ++c) sink ^= ops.a[p][c][0] ^ ops.a[p][c][1] ^ ops.a[p][c][2] ^ ops.a[p][c][3];
      sink ^= ops.b[0][0] ^ ops.b[0][1] ^ ops.b[1][0] ^ ops.b[1][1];
    }
  }
  float s = (float)sink;
  for (int p = 0; p < 2; ++p)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 4; ++i) s += acc[p][c][i];
  return s;
}

// bf16 pair (lo, hi) as one 32-bit word.
__device__ uint32_t pack2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <int MODE, bool CT>
__global__ void bound_kernel(const uint4* page_src, const float* x_src, float* out, long long* cycles, int warps,
                             int k_rt) {
  const int klen = CT ? K : k_rt;  // CT: K a compile-time constant (the loops unroll fully)
  extern __shared__ __align__(1024) uint8_t smem[];
  float* x = reinterpret_cast<float*>(smem + 8 * PAGE);
  uint2* xf = reinterpret_cast<uint2*>(x + K);  // [K / 128][32] packed B fragments
  for (int i = threadIdx.x; i < 8 * PAGE / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = page_src[i % (PAGE / 16)];
  for (int i = threadIdx.x; i < K; i += blockDim.x) x[i] = x_src[i];
  __syncthreads();
  for (int i = threadIdx.x; i < K / 128 * 32; i += blockDim.x) {
    const int chunk = i / 32, l = i % 32;
    int e0, e1;  // the two element pairs lane l's fragment holds
    if (MODE == LDS) {  // double chunk j, mma c: elements 256j + 32g + 8t + 4c + {0,1} / {2,3}
      const int j = chunk / 2, c = chunk % 2;
      e0 = 256 * j + 32 * (l >> 2) + 8 * (l & 3) + 4 * c;
      e1 = e0 + 2;
    } else {  // the product's mapping: x[2l, 2l + 1] and x[64 + 2l, 64 + 2l + 1] of the chunk
      e0 = 128 * chunk + 2 * l;
      e1 = e0 + 64;
    }
    xf[i] = make_uint2(pack2(x[e0], x[e0 + 1]), pack2(x[e1], x[e1 + 1]));
  }
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const uint32_t pa = mk::tk::smem_addr(smem + warp * PAGE), xa = mk::tk::smem_addr(x), xfa = mk::tk::smem_addr(xf);
  float s = 0.f, row0 = 0.f;
  for (int rep = 0; rep < 4; ++rep) {  // the first repetitions warm the instruction cache
    __syncthreads();
    const long long c0 = clock64();
    if (warp < warps) {
      if (MODE == XPACK || MODE == LDS || MODE == UNROLL4) {
        float acc[2][2][4] = {};
        if (MODE == XPACK) page_xpack(pa, xfa, acc, klen);
        else if (MODE == LDS) page_lds(pa, xfa, acc, klen);
        else page_unroll4(pa, xa, acc, klen);
        row0 = row_sum(acc, 0);
      } else if (MODE == FULL) {
        dot_rows_mma<2, 2>(pa, ROW_BYTES, 0, 4, klen, xa, reinterpret_cast<float*>(xf + K / 4) + warp * 4, 0);
      } else {
        s += page_rows<MODE>(pa, xa, klen);
      }
    }
    __syncwarp();
    const long long c1 = clock64();
    if (threadIdx.x == 0 && rep == 3) cycles[0] = c1 - c0;
  }
  __syncthreads();
  if (MODE == FULL) row0 = reinterpret_cast<float*>(xf + K / 4)[0];
  out[threadIdx.x] = s + row0;
}

template <int MODE, bool CT>
void run(const char* name, uint4* d_page, float* d_x, float* d_out, long long* d_cycles, double ref) {
  const int smem = 8 * PAGE + K * 4 + K / 128 * 32 * 8 + 64 * 4;
  MK_CUDA_CHECK(cudaFuncSetAttribute(bound_kernel<MODE, CT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int warps : {1, 2, 4, 8}) {
    bound_kernel<MODE, CT><<<1, 256, smem>>>(d_page, d_x, d_out, d_cycles, warps, K);
    MK_CUDA_CHECK_LAUNCH_SYNC();
    long long c;
    float row0;
    MK_CUDA_CHECK(cudaMemcpy(&c, d_cycles, sizeof(c), cudaMemcpyDeviceToHost));
    MK_CUDA_CHECK(cudaMemcpy(&row0, d_out, sizeof(float), cudaMemcpyDeviceToHost));
    printf("%-10s %s  warps %d  cycles %6lld  row0 %9.4f  ref %9.4f\n", name, CT ? "K const  " : "K runtime", warps, c,
           row0, ref);
  }
}

int main() {
  static unsigned short w[PAGE / 2];
  static float x[K];
  for (int i = 0; i < PAGE / 2; ++i) w[i] = (unsigned short)(0x3c00 + (i * 37 % 101));
  for (int i = 0; i < K; ++i) x[i] = ((i * 13 % 7) - 3) / 3.f;
  uint4* d_page;
  float *d_x, *d_out;
  long long* d_cycles;
  MK_CUDA_CHECK(cudaMalloc(&d_page, PAGE));
  MK_CUDA_CHECK(cudaMalloc(&d_x, sizeof(x)));
  MK_CUDA_CHECK(cudaMalloc(&d_out, 256 * sizeof(float)));
  MK_CUDA_CHECK(cudaMalloc(&d_cycles, sizeof(long long)));
  MK_CUDA_CHECK(cudaMemcpy(d_page, w, PAGE, cudaMemcpyHostToDevice));
  MK_CUDA_CHECK(cudaMemcpy(d_x, x, sizeof(x), cudaMemcpyHostToDevice));
  double ref = 0;  // row 0 . x with x rounded to bf16 like the tensor-core paths
  for (int k = 0; k < K; ++k) {
    const unsigned u = (unsigned)w[k] << 16;
    float wf, xr;
    memcpy(&wf, &u, 4);
    unsigned ux;
    memcpy(&ux, &x[k], 4);
    ux = (ux + 0x7fff + ((ux >> 16) & 1)) & 0xffff0000u;
    memcpy(&xr, &ux, 4);
    ref += (double)wf * xr;
  }
  run<FULL, true>("full", d_page, d_x, d_out, d_cycles, ref);
  run<FULL, false>("full", d_page, d_x, d_out, d_cycles, ref);
  run<UNROLL4, false>("unroll4", d_page, d_x, d_out, d_cycles, ref);
  run<MMA_ONLY, true>("mma_only", d_page, d_x, d_out, d_cycles, ref);
  run<LOADS_ONLY, true>("loads_only", d_page, d_x, d_out, d_cycles, ref);
  run<XPACK, true>("xpack", d_page, d_x, d_out, d_cycles, ref);
  run<XPACK, false>("xpack", d_page, d_x, d_out, d_cycles, ref);
  run<LDS, true>("lds", d_page, d_x, d_out, d_cycles, ref);
  run<LDS, false>("lds", d_page, d_x, d_out, d_cycles, ref);
  return 0;
}
