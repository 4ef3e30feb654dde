// compile-check: module mk_tk_tests
// math_tests.cu: row reductions/broadcasts on fp32 register tiles, register vectors, and the
// warp matvec (weights in global or in shared memory after a bulk load).
#include "common.cuh"

namespace mk::tk_tests {
namespace {
using namespace mk::tk;

constexpr int R = 32, C = 64;

// Modes: 0 row_sum -> out[R]; 1 row_max -> out[R]; 2 row_sum accumulated twice -> out[R];
//        3 softmax over each row (row_max, sub_row, exp2, row_sum, div_row) of src*log2(e) -> out[R*C];
//        4 mul_row by row_max -> out[R*C].
__global__ void row_ops_kernel(const float* src, float* out, int mode) {
  rt_fl<R, C> x;
  load(x, src, C);
  rt_col_vec<R> v;
  if (mode == 0 || mode == 1 || mode == 2) {
    if (mode == 1) {
      row_max(v, x);
    } else {
      row_sum(v, x);
      if (mode == 2) row_sum(v, x, /*accumulate=*/true);
    }
    const int g = lane_id() / 4;
    if (lane_id() % 4 == 0) {
      for (int i = 0; i < R / 16; ++i) {
        out[16 * i + g] = v.rows[i][0];
        out[16 * i + g + 8] = v.rows[i][1];
      }
    }
    return;
  }
  if (mode == 3) {
    apply(x, x, [](int, int, float s) { return s * 1.4426950408889634f; });
    row_max(v, x);
    sub_row(x, x, v);
    exp2(x, x);
    row_sum(v, x);
    div_row(x, x, v);
  } else {
    row_max(v, x);
    mul_row(x, x, v);
  }
  store(out, C, x);
}

constexpr int VN = 256;

// out[0] = sum, out[1] = sum of squares, out[2 .. 2+VN) = bf16-rounded copy via rv<bf16>.
__global__ void rv_kernel(const float* src, float* out) {
  __shared__ sv<float, VN> s;
  for (int i = threadIdx.x; i < VN; i += 32) s[i] = src[i];
  __syncwarp();
  rv_fl<VN> v;
  load(v, s);
  const float total = sum(v), squares = sum_squares(v);
  rv<bf16, VN> vb;
  load(vb, src);
  __shared__ sv<bf16, VN> sb;
  store(sb, vb);
  __syncwarp();
  if (lane_id() == 0) {
    out[0] = total;
    out[1] = squares;
  }
  rv_fl<VN> back;
  load(back, sb.subvec<VN>(0));
  store(out + 2, back);
}

constexpr int MV_ROWS = 8;   // rows per warp
constexpr int MV_WARPS = 4;  // warps per block
constexpr int MV_BLOCK_ROWS = MV_ROWS * MV_WARPS;

__global__ void matvec_global_kernel(const bf16* w, int ld, const float* x, int k, float* out) {
  const int row0 = blockIdx.x * MV_BLOCK_ROWS + warp_id() * MV_ROWS;
  float y[MV_ROWS];
  warp_matvec<MV_ROWS, mem_space::global>(y, w + size_t(row0) * ld, ld, x, k);
#pragma unroll
  for (int r = 0; r < MV_ROWS; ++r)  // constant indices keep y in registers
    if (lane_id() == r) out[row0 + r] = y[r];
}

// The block's 32 weight rows (contiguous, ld == k) and x are bulk-loaded into smem first.
__global__ void matvec_shared_kernel(const bf16* w, const float* x, int k, float* out,
                                     int* status) {
  extern __shared__ char smem[];
  const uint32_t w_bytes = uint32_t(MV_BLOCK_ROWS) * k * 2, x_bytes = uint32_t(k) * 4;
  smem_allocator alloc(smem, w_bytes + x_bytes + 3 * TILE_ALIGN);
  semaphore& sem = alloc.allocate<semaphore>();
  bf16* sw = &alloc.allocate<bf16, 128>();
  float* sx = reinterpret_cast<float*>(reinterpret_cast<char*>(sw) + w_bytes);
  if (threadIdx.x == 0) {
    init_semaphore(sem, 1);
    fence_semaphore_init();
    arrive_expect_tx(sem, w_bytes + x_bytes);
    bulk_load<cache_hint::evict_first>(sw, w + size_t(blockIdx.x) * MV_BLOCK_ROWS * k, w_bytes,
                                       sem);
    bulk_load<cache_hint::evict_last>(sx, x, x_bytes, sem);
  }
  __syncthreads();
  if (!wait(sem, 0, 1'000'000'000ull)) {
    atomicExch(status, 1);
    return;
  }
  float y[MV_ROWS];
  warp_matvec<MV_ROWS, mem_space::shared>(y, sw + size_t(warp_id()) * MV_ROWS * k, k, sx, k);
  const int row0 = blockIdx.x * MV_BLOCK_ROWS + warp_id() * MV_ROWS;
#pragma unroll
  for (int r = 0; r < MV_ROWS; ++r)  // constant indices keep y in registers
    if (lane_id() == r) out[row0 + r] = y[r];
}

void row_ops(std::uintptr_t src, std::uintptr_t out, int mode) {
  MK_REQUIRE(mode >= 0 && mode <= 4, "mode must be 0..4");
  row_ops_kernel<<<1, 32>>>(as_ptr<const float>(src), as_ptr<float>(out), mode);
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void rv_ops(std::uintptr_t src, std::uintptr_t out) {
  rv_kernel<<<1, 32>>>(as_ptr<const float>(src), as_ptr<float>(out));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void matvec(std::uintptr_t w, int rows, int ld, std::uintptr_t x, int k, std::uintptr_t out,
            bool weights_in_shared) {
  MK_REQUIRE(rows > 0 && rows % MV_BLOCK_ROWS == 0, "rows must be a multiple of 32");
  MK_REQUIRE(k > 0 && k % 8 == 0 && ld % 8 == 0 && ld >= k, "k, ld: multiples of 8, ld >= k");
  MK_REQUIRE(w % 16 == 0 && x % 16 == 0, "w and x must be 16-byte aligned");
  if (!weights_in_shared) {
    matvec_global_kernel<<<rows / MV_BLOCK_ROWS, 32 * MV_WARPS>>>(
        as_ptr<const bf16>(w), ld, as_ptr<const float>(x), k, as_ptr<float>(out));
    MK_CUDA_CHECK_LAUNCH_SYNC();
    return;
  }
  MK_REQUIRE(ld == k, "shared-memory matvec needs contiguous rows (ld == k)");
  const int smem_bytes = MV_BLOCK_ROWS * k * 2 + k * 4 + 3 * TILE_ALIGN;
  MK_REQUIRE(smem_bytes <= 220 * 1024, "k too large for the shared-memory test (k <= 3072)");
  device_status status;
  allow_dynamic_smem(matvec_shared_kernel, smem_bytes);
  matvec_shared_kernel<<<rows / MV_BLOCK_ROWS, 32 * MV_WARPS, smem_bytes>>>(
      as_ptr<const bf16>(w), as_ptr<const float>(x), k, as_ptr<float>(out), status.get());
  MK_CUDA_CHECK_LAUNCH_SYNC();
  status.check("matvec (shared): barrier wait timed out");
}
}  // namespace

void register_math(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("row_ops", &row_ops, py::arg("src"), py::arg("out"), py::arg("mode"));
  m.def("rv_ops", &rv_ops, py::arg("src"), py::arg("out"));
  m.def("matvec", &matvec, py::arg("w"), py::arg("rows"), py::arg("ld"), py::arg("x"),
        py::arg("k"), py::arg("out"), py::arg("weights_in_shared"));
  m.attr("ROW_OPS_SHAPE") = py::make_tuple(R, C);
  m.attr("RV_LENGTH") = VN;
}

}  // namespace mk::tk_tests
