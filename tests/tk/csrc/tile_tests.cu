// compile-check: module mk_tk_tests
// tile_tests.cu: shared <-> register tile moves (ldmatrix, ldmatrix.trans, conversions, subtile
// views) and the warp mma.sync products.
#include "common.cuh"

namespace mk::tk_tests {
namespace {
using namespace mk::tk;

// Logical row-major global matrix -> swizzled shared tile (element by element through idx).
template <typename ST, typename T>
__device__ void fill_tile(ST& tile, const T* src) {
  for (int i = threadIdx.x; i < ST::ROWS * ST::COLS; i += blockDim.x)
    tile(i / ST::COLS, i % ST::COLS) = src[i];
}

constexpr int R = 32, C = 64;

// Modes: 0 bf16 st -> rt_bf row -> bf16 out;  1 bf16 st -> rt_bf col -> bf16 out;
//        2 bf16 st -> rt_fl row -> fp32 out;  3 fp32 st -> rt_fl col -> st_fl (store) -> fp32 out;
//        4 subtile (1, 1) of a 64x128 bf16 tile -> rt_bf row -> bf16 out (32x64).
__global__ void roundtrip_kernel(const void* src, void* out, int mode) {
  __shared__ st_bf<64, 128> big;  // static smem is 1024-aligned by the type's alignas
  __shared__ st_fl<R, C> tile_f;
  auto& tile_b = *reinterpret_cast<st_bf<R, C>*>(&big);
  const auto* src_b = static_cast<const bf16*>(src);
  const auto* src_f = static_cast<const float*>(src);
  if (mode == 4) {
    fill_tile(big, src_b);
  } else if (mode == 3) {
    fill_tile(tile_f, src_f);
  } else {
    fill_tile(tile_b, src_b);
  }
  __syncthreads();
  if (warp_id() != 0) return;
  if (mode == 0) {
    rt_bf<R, C> r;
    load(r, tile_b);
    store(static_cast<bf16*>(out), C, r);
  } else if (mode == 1) {
    rt_bf<R, C, rt_layout::col> r;
    load(r, tile_b);
    store(static_cast<bf16*>(out), C, r);
  } else if (mode == 2) {
    rt_fl<R, C> r;
    load(r, tile_b);
    store(static_cast<float*>(out), C, r);
  } else if (mode == 3) {
    rt_fl<R, C, rt_layout::col> r;
    load(r, tile_f);
    rt_fl<R, C, rt_layout::col> doubled;
    apply(doubled, r, [](int, int, float x) { return 2.f * x; });
    store(tile_f, doubled);
    __syncwarp();
    for (int i = lane_id(); i < R * C; i += 32) static_cast<float*>(out)[i] = tile_f(i / C, i % C);
  } else {
    rt_bf<R, C> r;
    load(r, subtile<R, C>(big, 1, 1));
    store(static_cast<bf16*>(out), C, r);
  }
}

constexpr int M = 32, N = 64, K = 64;

// d = a @ b^T + c (mode 0, b is [N, K]) or d = a @ b + c (mode 1, b is [K, N]); c is read from d.
__global__ void mma_kernel(const bf16* a, const bf16* b, float* d, int mode) {
  __shared__ st_bf<M, K> sa;
  __shared__ st_bf<64, 64> sb;  // N == K == 64, so one shape serves both modes
  fill_tile(sa, a);
  fill_tile(sb, b);
  __syncthreads();
  if (warp_id() != 0) return;
  rt_bf<M, K> ra;
  load(ra, sa);
  rt_fl<M, N> acc;
  load(acc, d, N);
  if (mode == 0) {
    rt_bf<N, K> rb;
    load(rb, sb);
    mma_ABt(acc, ra, rb, acc);
  } else {
    rt_bf<K, N, rt_layout::col> rb;
    load(rb, sb);
    mma_AB(acc, ra, rb, acc);
  }
  store(d, N, acc);
}

// Two floats by shared-window address (the interpreter reads x as bf16; this test packs fp32 pairs itself).
__device__ __forceinline__ float2 load_shared_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// d = a @ bf16(bt)^T + d with raw fragments (no tiles): a [16, 16] bf16 through ldmatrix_x4_shared, bt
// [8, 16] fp32 read as pairs with load_shared_f2 and packed to bf16, then one mma_16x8x16_acc; the
// primitives the batch-1 page matvec builds on (csrc/interpreter/dot_rows_mma.cuh).
__global__ void raw_mma_kernel(const bf16* a, const float* bt, float* d) {
  __shared__ __align__(128) bf16 sa[16 * 16];
  __shared__ __align__(128) float sbt[8 * 16];
  for (int i = threadIdx.x; i < 16 * 16; i += blockDim.x) sa[i] = a[i];
  for (int i = threadIdx.x; i < 8 * 16; i += blockDim.x) sbt[i] = bt[i];
  __syncthreads();
  const int l = lane_id(), g = l / 4, t = l % 4;
  uint32_t af[4];  // matrices: rows 0-7 / 8-15 of k 0-7, then of k 8-15
  ldmatrix_x4_shared(af, smem_addr(sa) + (uint32_t)(((l % 8) + 8 * ((l / 8) % 2)) * 32 + (l / 16) * 16));
  uint32_t bf[2];
  for (int h = 0; h < 2; ++h) {
    const float2 v = load_shared_f2(smem_addr(sbt) + (uint32_t)(g * 16 + 8 * h + 2 * t) * 4);
    const __nv_bfloat162 p = __floats2bfloat162_rn(v.x, v.y);
    bf[h] = *reinterpret_cast<const uint32_t*>(&p);
  }
  float acc[4] = {d[g * 8 + 2 * t], d[g * 8 + 2 * t + 1], d[(g + 8) * 8 + 2 * t], d[(g + 8) * 8 + 2 * t + 1]};
  detail::mma_16x8x16_acc(acc, af, bf[0], bf[1]);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

void raw_mma(std::uintptr_t a, std::uintptr_t bt, std::uintptr_t d) {
  raw_mma_kernel<<<1, 32>>>(as_ptr<const bf16>(a), as_ptr<const float>(bt), as_ptr<float>(d));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void tile_roundtrip(std::uintptr_t src, std::uintptr_t out, int mode) {
  MK_REQUIRE(mode >= 0 && mode <= 4, "mode must be 0..4");
  roundtrip_kernel<<<1, 128>>>(as_ptr<const void>(src), as_ptr<void>(out), mode);
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void mma(std::uintptr_t a, std::uintptr_t b, std::uintptr_t d, bool transpose_b) {
  mma_kernel<<<1, 64>>>(as_ptr<const bf16>(a), as_ptr<const bf16>(b), as_ptr<float>(d),
                        transpose_b ? 0 : 1);
  MK_CUDA_CHECK_LAUNCH_SYNC();
}
}  // namespace

void register_tiles(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("tile_roundtrip", &tile_roundtrip, py::arg("src"), py::arg("out"), py::arg("mode"));
  m.def("mma", &mma, py::arg("a"), py::arg("b"), py::arg("d"), py::arg("transpose_b"));
  m.def("raw_mma", &raw_mma, py::arg("a"), py::arg("bt"), py::arg("d"));
  m.attr("ROUNDTRIP_SHAPE") = py::make_tuple(R, C);
  m.attr("MMA_SHAPE") = py::make_tuple(M, N, K);
}

}  // namespace mk::tk_tests
